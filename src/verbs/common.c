/* Option helpers shared by the verbs. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/gemm.h"
#include "engine/graph.h"
#include "engine/session.h"
#include "engine/threads.h"
#include "engine/xwt.h"
#include "model/yamlutil.h"
#include "verbs/verbs.h"

int verb_bad_option(const char *verb, int c, char **argv,
		    struct dl_error *err)
{
	const char *opt = argv[optind - 1];
	if (c == ':')
		return dl_error_set(err, DL_EINPUT,
				    "%s: option '%s' needs a value; see 'dlrun %s --help'",
				    verb, opt, verb);
	return dl_error_set(err, DL_EINPUT,
			    "%s: unknown option '%s'; see 'dlrun %s --help'", verb,
			    optopt && optopt != '?' ? (char[]){'-', (char)optopt, 0} : opt, verb);
}

int verb_int(const char *verb, const char *opt, const char *s, long long min,
	     long long max, long long *out, struct dl_error *err)
{
	int64_t v;
	if (dl_parse_int(s, &v) || v < min || v > max)
		return dl_error_set(err, DL_EINPUT,
				    "%s: %s takes an integer from %lld to %lld, got '%s'",
				    verb, opt, min, max, s);
	*out = v;
	return 0;
}

int verb_threads(const char *verb, const char *s, struct dl_error *err)
{
	long long n = 0;
	if (s && verb_int(verb, "--threads", s, 1, 1024, &n, err))
		return DL_EINPUT;
	dl_set_threads((int)n);
	return 0;
}

int verb_max_memory(const char *verb, const char *s, struct dl_error *err)
{
	if (!s)
		return 0;
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	double unit = 1;
	switch (*end) {
	case 'k': case 'K': unit = 1024.0; end++; break;
	case 'm': case 'M': unit = 1024.0 * 1024; end++; break;
	case 'g': case 'G': unit = 1024.0 * 1024 * 1024; end++; break;
	case 't': case 'T': unit = 1024.0 * 1024 * 1024 * 1024; end++; break;
	}
	if (end == s || *end || errno || !(v > 0) || v * unit > 1e18)
		return dl_error_set(err, DL_EINPUT, "%s: --max-memory takes a positive "
				    "size in bytes with an optional K, M, G or T suffix "
				    "(e.g. 512M), got '%s'", verb, s);
	dl_set_max_memory((size_t)(v * unit));
	return 0;
}

int verb_model_arg(const char *verb, int argc, char **argv,
		   const char **model, struct dl_error *err)
{
	if (optind >= argc)
		return dl_error_set(err, DL_EINPUT,
				    "%s: which model? usage: dlrun %s MODEL.yaml ...; see 'dlrun %s --help'",
				    verb, verb, verb);
	if (optind + 1 < argc)
		return dl_error_set(err, DL_EINPUT,
				    "%s: one model only; unexpected '%s'", verb, argv[optind + 1]);
	*model = argv[optind];
	return 0;
}

int verb_weights(struct dl_graph *g, const char *path, int ignore_extra,
		 struct dl_error *err)
{
	int ignored = 0;
	int rc = dl_model_load_weights_ext(g, path, ignore_extra, &ignored, err);
	if (rc == 0 && ignored)
		fprintf(stderr, "dlrun: ignored %d key%s of %s not used by the model\n",
			ignored, ignored == 1 ? "" : "s", path);
	return rc;
}

int verb_load_weights(struct dl_graph *g, const char *wflag, int ignore_extra,
		      struct dl_error *err)
{
	int64_t buffers;
	int64_t params = dl_model_count_params(g, &buffers);
	if (!wflag && params + buffers == 0)
		return 0;
	if (wflag)
		return verb_weights(g, wflag, ignore_extra, err);
	char *path = dl_model_default_weights(g);
	if (!path)
		return dl_error_set(err, DL_ERUN, "out of memory");
	int rc;
	if (access(path, F_OK) != 0)
		rc = dl_error_set(err, DL_EINPUT,
				  "%s: no weights file (%s); make one with 'dlrun init %s -o %s' "
				  "or train one, or pass -w WEIGHTS",
				  g->file, path, g->file, path);
	else
		rc = verb_weights(g, path, ignore_extra, err);
	free(path);
	return rc;
}

void verb_usage(const struct verb *v)
{
	fputs(v->usage, stdout);
}

/* Shape inference for verbs that have no data: the model's own sizes, or
 * --input-shape for symbolic ones. */
int verb_infer_shapes(struct dl_graph *g, char **specs, int n_specs,
		      int64_t batch, struct dl_error *err)
{
	return verb_infer_shapes_as(g, specs, n_specs, batch, NULL, err);
}

/* Sizes tried for a symbolic size no --input-shape gives: small first
 * (gradcheck evaluates the model hundreds of times), then larger ones for
 * models whose convolutions and pools need more. */
static const int64_t sym_fill[] = {8, 16, 32, 64, 128, 256, 512, 1024, 4, 2, 1};
#define N_SYM_FILL ((int)(sizeof sym_fill / sizeof *sym_fill))

int verb_infer_shapes_as(struct dl_graph *g, char **specs, int n_specs,
			 int64_t batch, int64_t *filled, struct dl_error *err)
{
	const char *const *sp = (const char *const *)specs;
	if (filled)
		*filled = 0;
	if (n_specs == 0 && g->n_syms == 0 && batch == 1 && g->shapes_ready)
		return 0;
	int unbound = 0;
	int rc = dl_model_infer_spec_fill(g, sp, n_specs, batch, 0, &unbound, err);
	if (rc == 0 || !unbound)
		return rc;
	/* A symbolic size left open: the parameters' shapes do not depend on
	 * it in most models (a sequence length, an image size), so take the
	 * first size the model accepts, after a second accepted size has shown
	 * that the parameters keep their shapes. */
	struct dl_error first = *err;
	int c1 = -1;
	for (int k = 0; k < N_SYM_FILL && c1 < 0; k++) {
		dl_error_clear(err);
		if (dl_model_infer_spec_fill(g, sp, n_specs, batch, sym_fill[k], NULL, err) == 0)
			c1 = k;
	}
	dl_error_clear(err);
	if (c1 < 0) {
		*err = first;
		return err->code;
	}
	for (int k = c1 + 1; k < N_SYM_FILL; k++) {
		if (dl_model_infer_spec_fill(g, sp, n_specs, batch, sym_fill[k], NULL, err) == 0)
			break;
		/* declare()'s message when a parameter would change shape */
		if (strstr(err->msg, "would change shape")) {
			char why[sizeof err->msg];
			snprintf(why, sizeof why, "%s", err->msg);
			dl_error_clear(err);
			return dl_error_set(err, DL_EINPUT, "%s; and the parameters' shapes depend "
					    "on it (%s)", first.msg, why);
		}
		dl_error_clear(err);
	}
	if ((rc = dl_model_infer_spec_fill(g, sp, n_specs, batch, sym_fill[c1], NULL, err)) != 0)
		return rc;
	if (filled)
		*filled = sym_fill[c1];
	return 0;
}

void verb_note_filled(const struct dl_graph *g, int n_specs, int64_t filled)
{
	if (!filled)
		return;
	char names[512] = "";
	size_t used = 0;
	for (int i = 0; i < g->n_syms && used < sizeof names; i++)
		used += (size_t)snprintf(names + used, sizeof names - used, "%s%s",
					 i ? ", " : "", g->sym_names[i]);
	fprintf(stderr, "dlrun: symbolic size%s %s%s taken as %lld (--input-shape sets %s)\n",
		g->n_syms > 1 ? "s" : "", names, n_specs ? " (those not given)" : "",
		(long long)filled, g->n_syms > 1 ? "them" : "it");
}

int verb_fuse(void)
{
	const char *f = getenv("DLRUN_FUSE");
	return !(f && strcmp(f, "0") == 0);
}

struct dl_xwt_set *verb_xwt(const struct dl_graph *g)
{
	const char *f = getenv("DLRUN_PACK");
	return f && strcmp(f, "0") == 0 ? NULL : dl_xwt_set_new(g);
}

void verb_session_env(struct dl_session *s)
{
	const char *p = getenv("DLRUN_PACK");
	s->fuse = verb_fuse();
	s->pack = !(p && strcmp(p, "0") == 0);
}

void verb_note_ignored(const struct dl_session *s)
{
	if (s->n_ignored)
		fprintf(stderr, "dlrun: ignored %d key%s of %s not used by the model\n",
			s->n_ignored, s->n_ignored == 1 ? "" : "s",
			s->weights ? s->weights : "the weights file");
}
