/* The verbs: each parses its own options and runs; errors go back in a
 * struct dl_error for main.c to print. */
#ifndef DL_VERBS_H
#define DL_VERBS_H

#include "model/model.h"

struct verb {
	const char *name;
	const char *summary;   /* one line for `dlrun --help` */
	const char *usage;     /* the whole `dlrun VERB --help` text */
	int (*run)(int argc, char **argv, struct dl_error *err);
};

extern const struct verb verb_infer, verb_train, verb_gradcheck, verb_init,
	verb_summary, verb_bench, verb_draw, verb_ops;
extern const struct verb verb_import;
extern const struct verb verb_generate;
extern const struct verb verb_plot;
extern const int verb_import_built;   /* 1 when built with ONNX import */

/* ---- shared by the verbs (common.c) ---- */

/* Reports an unknown option or a missing argument for getopt's result. */
int verb_bad_option(const char *verb, int c, char **argv,
		    struct dl_error *err);
/* An integer option value in [min, max]. */
int verb_int(const char *verb, const char *opt, const char *s, long long min,
	     long long max, long long *out, struct dl_error *err);
/* The --threads value; sets BLAS and op threads. */
int verb_threads(const char *verb, const char *s, struct dl_error *err);
/* Whether inference plans run the fusion pass (engine/fuse.c): yes, unless
 * the environment sets DLRUN_FUSE=0. */
int verb_fuse(void);
/* The set of packed y = x W^T weights for an inference graph whose
 * weights are fixed (engine/xwt.h), its parameters placed; NULL when the
 * environment says DLRUN_PACK=0 (or out of memory): dl_sgemm. */
struct dl_xwt_set *verb_xwt(const struct dl_graph *g);
/* --max-memory SIZE (bytes, or with a K, M, G or T suffix): sets
 * dl_set_max_memory; NULL leaves the default. */
int verb_max_memory(const char *verb, const char *s, struct dl_error *err);
/* Exactly one MODEL operand after the options. */
int verb_model_arg(const char *verb, int argc, char **argv,
		   const char **model, struct dl_error *err);
/* Loads weights into g when it has parameters: from wflag, else the
 * model's default path; a missing default file says how to make one. */
int verb_load_weights(struct dl_graph *g, const char *wflag, int ignore_extra,
		      struct dl_error *err);
/* Loads the weights file path (every key problem at once); with
 * ignore_extra, or for keys the model's ignore_keys: names, unused keys
 * are skipped and counted in one line on stderr. */
int verb_weights(struct dl_graph *g, const char *path, int ignore_extra,
		 struct dl_error *err);
/* Shape inference for verbs that have no data: the model's own sizes with
 * batch `batch`, and --input-shape NAME=d1,d2,... for symbolic ones. */
int verb_infer_shapes(struct dl_graph *g, char **specs, int n_specs,
		      int64_t batch, struct dl_error *err);
/* The same, and a symbolic size that no spec gives is set to the first of
 * 8, 16, 32, ... that the model accepts, when the parameters' shapes do not
 * depend on it (else an error asks for --input-shape); *filled (may be
 * NULL) gets that size, or 0 when none was needed. */
int verb_infer_shapes_as(struct dl_graph *g, char **specs, int n_specs,
			 int64_t batch, int64_t *filled, struct dl_error *err);
/* Says on stderr which size verb_infer_shapes_as took (nothing for 0). */
void verb_note_filled(const struct dl_graph *g, int n_specs, int64_t filled);
/* The environment's say on a session's run path: DLRUN_FUSE=0 turns the
 * fusion pass off, DLRUN_PACK=0 the packed weights. */
struct dl_session;
void verb_session_env(struct dl_session *s);
/* Says on stderr how many keys of the weights file the session skipped
 * (--ignore-extra, ignore_keys:), when any. */
void verb_note_ignored(const struct dl_session *s);
/* Prints the verb's usage to stdout. */
void verb_usage(const struct verb *v);

#endif
