/* dlrun infer: a filter from input arrays to output arrays, step by step,
 * each step answered and flushed before the next is read, so it works in a
 * pipeline and as a co-process. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/session.h"
#include "io/atomic.h"
#include "io/npy.h"
#include "io/text.h"
#include "verbs/infer_files.h"
#include "verbs/verbs.h"

struct source {
	const char *path;        /* "-" for stdin */
	FILE *f;
	int owned;
	struct dl_text_reader text;
	int text_ready;
	int looked;              /* its first byte checked against --format */
};

struct sink {
	const char *path;        /* "-" for stdout */
	struct dl_atomic out;
	int open;
};

struct infer {
	struct dl_session *s;    /* the one run path (engine/session.h) */
	struct dl_graph *g;      /* s->g */
	int text;                /* --format text */
	long long batch;         /* --batch-size, 0: whole arrays (npy) */
	struct source *src;      /* distinct sources */
	int n_src;
	int *src_of;             /* [n_inputs] index into src */
	struct sink *sink;
	int n_sink;
	int *sink_of;            /* [n_outputs] index into sink */
	float **in_data;         /* [n_inputs] this step's arrays */
	size_t *in_cap;          /* floats */
	struct dl_shape *in_shape;
	float **out_data;        /* [n_outputs] this step's whole outputs */
	size_t *out_cap;
	struct dl_shape *out_shape;
	struct dl_shape *chunk;  /* [n_inputs] */
	float **chunk_ptr;
	int ignore_extra;           /* --ignore-extra */
	const char *wflag;
	/* --batch-size with one input: the array's data is read chunk by
	 * chunk from its stream (memory bounded by the chunk), after its
	 * header; outputs are still gathered whole, so a stream that breaks
	 * off midway writes nothing. */
	int streamed;
	struct dl_npy_header pending;
};

static const char *src_name(const struct source *s)
{
	return strcmp(s->path, "-") == 0 ? "stdin" : s->path;
}

static int grow_floats(float **p, size_t *cap, int64_t n, struct dl_error *err)
{
	size_t want = n > 0 ? (size_t)n : 1;
	if (want <= *cap)
		return 0;
	float *q = realloc(*p, want * sizeof *q);
	if (!q)
		return dl_error_set(err, DL_ERUN, "out of memory for %zu values", want);
	*p = q;
	*cap = want;
	return 0;
}

static int name_is(const char *s, const char *name, size_t len)
{
	return strlen(s) == len && strncmp(s, name, len) == 0;
}

/* The top-level entry scope that output k comes from (its producer's
 * first scope segment), in buf; "" for a model input. */
static const char *output_entry(const struct dl_graph *g, int k, char *buf, size_t size)
{
	int p = g->values[g->outputs[k]].producer;
	buf[0] = '\0';
	if (p >= 0 && g->nodes[p].scope)
		snprintf(buf, size, "%.*s", (int)strcspn(g->nodes[p].scope, "."),
			 g->nodes[p].scope);
	return buf;
}

/* Output k for NAME (len bytes): its name; NAME.0 for an entry's first
 * array (as in in: lists); and for the default output ('output', 'output.1'
 * of a model without outputs:) also the last entry's own name, which
 * model-format says the output is. -1: none. */
static int output_index(const struct dl_graph *g, const char *name, size_t len)
{
	for (int k = 0; k < g->n_outputs; k++)
		if (name_is(g->output_names[k], name, len))
			return k;
	if (len > 2 && strncmp(name + len - 2, ".0", 2) == 0)
		for (int k = 0; k < g->n_outputs; k++)
			if (name_is(g->output_names[k], name, len - 2))
				return k;
	char entry[512], alias[600];
	for (int k = 0; k < g->n_outputs; k++) {
		const char *o = g->output_names[k];
		if (strncmp(o, "output", 6) != 0 || (o[6] && o[6] != '.') ||
		    !*output_entry(g, k, entry, sizeof entry) || strcmp(entry, "output") == 0)
			continue;
		snprintf(alias, sizeof alias, "%s%s", entry, o + 6);
		if (name_is(alias, name, len) ||
		    (!o[6] && len == strlen(entry) + 2 && strncmp(name, entry, strlen(entry)) == 0 &&
		     strncmp(name + len - 2, ".0", 2) == 0))
			return k;
	}
	return -1;
}

/* Output j is one of the later arrays of output k's entry: k's name then
 * '.' and digits ('enc' and 'enc.1'). */
static int later_array_of(const struct dl_graph *g, int k, int j)
{
	const char *a = g->output_names[k], *b = g->output_names[j];
	size_t l = strlen(a);
	if (strncmp(a, b, l) != 0 || b[l] != '.' || !b[l + 1])
		return 0;
	for (const char *q = b + l + 1; *q; q++)
		if (*q < '0' || *q > '9')
			return 0;
	return g->values[g->outputs[j]].producer == g->values[g->outputs[k]].producer;
}

static int input_index(const struct dl_graph *g, const char *name, size_t len)
{
	for (int i = 0; i < g->n_inputs; i++)
		if (strlen(g->inputs[i].name) == len &&
		    strncmp(g->inputs[i].name, name, len) == 0)
			return i;
	return -1;
}

/* [s, end) is a name (letters, digits, '_', '-', and '.' as in enc.1),
 * not part of a path. */
static int is_word(const char *s, const char *end)
{
	if (s == end)
		return 0;
	for (; s < end; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_' || *s == '-' || *s == '.'))
			return 0;
	return 1;
}

/* "a, b" for messages (static buffer). */
static const char *output_list(const struct dl_graph *g)
{
	static char buf[512];
	size_t used = 0;
	buf[0] = '\0';
	for (int k = 0; k < g->n_outputs && used < sizeof buf; k++)
		used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s",
					 k ? ", " : "", g->output_names[k]);
	return buf;
}

static int add_source(struct infer *I, const char *path)
{
	for (int s = 0; s < I->n_src; s++)
		if (strcmp(path, "-") == 0 && strcmp(I->src[s].path, "-") == 0)
			return s;
	I->src[I->n_src].path = path;
	return I->n_src++;
}

/* Binds inputs to streams: -i NAME=PATH, -i PATH in order, else stdin. */
static int bind_sources(struct infer *I, char **ins, int n_ins,
			struct dl_error *err)
{
	struct dl_graph *g = I->g;
	I->src = calloc((size_t)g->n_inputs + 1, sizeof *I->src);
	I->src_of = malloc((size_t)g->n_inputs * sizeof *I->src_of);
	if (!I->src || !I->src_of)
		return dl_error_set(err, DL_ERUN, "out of memory");
	for (int i = 0; i < g->n_inputs; i++)
		I->src_of[i] = -1;
	int next = 0;
	for (int k = 0; k < n_ins; k++) {
		const char *eq = strchr(ins[k], '=');
		int i = eq ? input_index(g, ins[k], (size_t)(eq - ins[k])) : -1;
		if (i < 0 && eq && is_word(ins[k], eq))
			return dl_error_set(err, DL_EINPUT,
					    "infer: -i %s: the model has no input '%.*s'",
					    ins[k], (int)(eq - ins[k]), ins[k]);
		const char *path = i >= 0 ? eq + 1 : ins[k];
		if (i < 0) {
			while (next < g->n_inputs && I->src_of[next] >= 0)
				next++;
			if (next >= g->n_inputs)
				return dl_error_set(err, DL_EINPUT,
						    "infer: more -i files than the model's %d input%s",
						    g->n_inputs, g->n_inputs == 1 ? "" : "s");
			i = next;
		} else if (I->src_of[i] >= 0) {
			return dl_error_set(err, DL_EINPUT, "infer: input '%s' is given twice with -i",
					    g->inputs[i].name);
		}
		I->src_of[i] = add_source(I, path);
	}
	int from_stdin = 0;
	for (int i = 0; i < g->n_inputs; i++) {
		if (I->src_of[i] < 0)
			I->src_of[i] = add_source(I, "-");
		from_stdin += strcmp(I->src[I->src_of[i]].path, "-") == 0;
	}
	if (from_stdin && I->wflag && strcmp(I->wflag, "-") == 0)
		return dl_error_set(err, DL_EINPUT,
				    "infer: -w - reads the weights from stdin, so the inputs "
				    "need -i NAME=PATH files");
	if (I->text && from_stdin > 1)
		return dl_error_set(err, DL_EINPUT,
				    "infer: a model with several inputs takes text only from "
				    "-i NAME=PATH files, one per input");
	for (int s = 0; s < I->n_src; s++) {
		struct source *src = &I->src[s];
		if (strcmp(src->path, "-") == 0) {
			src->f = stdin;
		} else {
			src->f = fopen(src->path, "rb");
			if (!src->f)
				return dl_error_set(err, DL_EINPUT, "%s: cannot open: %s",
						    src->path, strerror(errno));
			src->owned = 1;
		}
		if (I->text) {
			dl_text_reader_init(&src->text, src->f, src_name(src));
			src->text_ready = 1;
		}
	}
	return 0;
}

/* Binds outputs to sinks: -o NAME=PATH, one -o PATH for all, else stdout. */
static int bind_sinks(struct infer *I, char **outs, int n_outs,
		      struct dl_error *err)
{
	struct dl_graph *g = I->g;
	I->sink = calloc((size_t)g->n_outputs + 1, sizeof *I->sink);
	I->sink_of = malloc((size_t)g->n_outputs * sizeof *I->sink_of);
	if (!I->sink || !I->sink_of)
		return dl_error_set(err, DL_ERUN, "out of memory");
	for (int k = 0; k < g->n_outputs; k++)
		I->sink_of[k] = -1;
	int all = -1;
	for (int j = 0; j < n_outs; j++) {
		const char *eq = strchr(outs[j], '=');
		int k = eq ? output_index(g, outs[j], (size_t)(eq - outs[j])) : -1;
		if (k < 0 && eq && is_word(outs[j], eq))
			return dl_error_set(err, DL_EINPUT,
					    "infer: -o %s: the model has no output '%.*s' (outputs: %s)",
					    outs[j], (int)(eq - outs[j]), outs[j], output_list(g));
		if (k < 0) {
			if (all >= 0 || j > 0)
				return dl_error_set(err, DL_EINPUT,
						    "infer: give one -o PATH for all outputs, or "
						    "-o NAME=PATH for each (outputs: %s%s)",
						    g->output_names[0], g->n_outputs > 1 ? ", ..." : "");
			I->sink[I->n_sink].path = outs[j];
			all = I->n_sink++;
			continue;
		}
		if (all >= 0)
			return dl_error_set(err, DL_EINPUT,
					    "infer: -o PATH and -o NAME=PATH do not mix");
		if (I->sink_of[k] >= 0)
			return dl_error_set(err, DL_EINPUT, "infer: output '%s' is given twice with -o",
					    g->output_names[k]);
		I->sink[I->n_sink].path = eq + 1;
		I->sink_of[k] = I->n_sink++;
	}
	/* an entry with several arrays named alone (-o enc=PATH): its later
	 * arrays (enc.1) go to the same file, back to back as on stdout,
	 * unless -o names them too */
	for (int k = 0; k < g->n_outputs && all < 0; k++)
		for (int j = k + 1; I->sink_of[k] >= 0 && j < g->n_outputs; j++)
			if (I->sink_of[j] < 0 && later_array_of(g, k, j))
				I->sink_of[j] = I->sink_of[k];
	int to_stdout = -1, n_stdout = 0;
	for (int k = 0; k < g->n_outputs; k++) {
		if (I->sink_of[k] >= 0)
			continue;
		if (all >= 0) {
			I->sink_of[k] = all;
			continue;
		}
		if (to_stdout < 0) {
			I->sink[I->n_sink].path = "-";
			to_stdout = I->n_sink++;
		}
		I->sink_of[k] = to_stdout;
		n_stdout++;
	}
	if (I->text && g->n_outputs > 1) {
		for (int k = 0; k < g->n_outputs; k++)
			for (int j = 0; j < k; j++)
				if (I->sink_of[k] == I->sink_of[j])
					return dl_error_set(err, DL_EINPUT,
							    "infer: in text format a model with several "
							    "outputs needs -o NAME=PATH for each");
	}
	for (int s = 0; s < I->n_sink; s++) {
		int rc = dl_atomic_open(&I->sink[s].out, I->sink[s].path, err);
		if (rc)
			return rc;
		I->sink[s].open = 1;
	}
	return 0;
}

static int ensure_weights(struct infer *I, struct dl_error *err)
{
	if (I->s->weights_loaded || !I->g->params_ready)
		return 0;
	int rc = dl_session_load_weights(I->s, err);
	if (rc == 0)
		verb_note_ignored(I->s);
	return rc;
}

/* Runs the model over one step's arrays in chunks of --batch-size,
 * gathering the whole outputs in out_data. */
static int run_step(struct infer *I, struct dl_error *err)
{
	struct dl_graph *g = I->g;
	int64_t n = -1;
	for (int i = 0; i < g->n_inputs; i++) {
		int64_t b = I->in_shape[i].d[0];
		if (b == 1 && n < 0)
			continue;
		if (n < 0 || n == 1)
			n = b;
		else if (b != n && b != 1)
			return dl_error_set(err, DL_EINPUT,
					    "input '%s' has %lld samples but '%s' has %lld; give "
					    "every input the same batch size (or 1 to share it)",
					    g->inputs[i].name, (long long)b, g->inputs[0].name,
					    (long long)n);
	}
	if (n < 0)
		n = 1;
	/* Whole-step inference first: errors before any compute, output
	 * shapes for the whole arrays. */
	int rc = dl_graph_infer(g, I->in_shape, err);
	if (rc == 0)
		rc = ensure_weights(I, err);
	if (rc)
		return rc;
	for (int k = 0; k < g->n_outputs; k++) {
		I->out_shape[k] = g->values[g->outputs[k]].shape;
		if ((rc = grow_floats(&I->out_data[k], &I->out_cap[k],
				      dl_shape_numel(&I->out_shape[k]), err)) != 0)
			return rc;
	}
	int64_t step = I->batch > 0 && I->batch < n ? I->batch : n;
	if (I->streamed && (rc = grow_floats(&I->in_data[0], &I->in_cap[0],
					    step * dl_shape_prod(&I->in_shape[0], 1, I->in_shape[0].ndim),
					    err)) != 0)
		return rc;
	for (int64_t off = 0; off < n || (n == 0 && off == 0); off += step ? step : 1) {
		int64_t cb = n - off < step ? n - off : step;
		for (int i = 0; i < g->n_inputs; i++) {
			int64_t per = dl_shape_prod(&I->in_shape[i], 1, I->in_shape[i].ndim);
			I->chunk[i] = I->in_shape[i];
			I->chunk_ptr[i] = I->in_data[i];
			if (I->streamed) {
				/* this chunk's rows, straight from the stream */
				const struct source *src = &I->src[I->src_of[i]];
				I->chunk[i].d[0] = cb;
				if ((rc = dl_npy_read_f32(src->f, src_name(src), &I->pending, cb * per,
							  I->in_data[i], err)) != 0)
					return rc;
			} else if (I->in_shape[i].d[0] == n && n != 1) {
				I->chunk[i].d[0] = cb;
				I->chunk_ptr[i] += off * per;
			}
		}
		if ((rc = dl_session_run(I->s, I->chunk, I->chunk_ptr, err)) != 0)
			return rc;
		for (int k = 0; k < g->n_outputs; k++) {
			const struct dl_value *v = &g->values[g->outputs[k]];
			int64_t per = dl_shape_prod(&v->shape, 1, v->shape.ndim);
			int64_t at = I->out_shape[k].d[0] == n ? off : 0;
			memcpy(I->out_data[k] + at * per, v->data,
			       (size_t)dl_shape_numel(&v->shape) * sizeof(float));
		}
		if (n == 0)
			break;
	}
	return 0;
}

static int write_outputs(struct infer *I, struct dl_error *err)
{
	struct dl_graph *g = I->g;
	for (int k = 0; k < g->n_outputs; k++) {
		struct sink *s = &I->sink[I->sink_of[k]];
		const char *name = strcmp(s->path, "-") == 0 ? "stdout" : s->path;
		int rc;
		if (I->text) {
			int64_t rows = I->out_shape[k].d[0];
			int64_t width = dl_shape_prod(&I->out_shape[k], 1, I->out_shape[k].ndim);
			rc = dl_text_write_rows(s->out.f, name, I->out_data[k], rows, width, err);
		} else {
			struct dl_tensor t = {I->out_shape[k], I->out_data[k]};
			rc = dl_npy_write(s->out.f, name, &t, err);
		}
		if (rc && errno == EPIPE && s->out.f == stdout)
			return err->code = DL_EPIPE;
		if (rc)
			return rc;
	}
	for (int s = 0; s < I->n_sink; s++)
		if (fflush(I->sink[s].out.f) != 0)
			return errno == EPIPE && I->sink[s].out.f == stdout
				? (err->code = DL_EPIPE)
				: dl_error_set(err, DL_ERUN, "%s: write failed: %s",
					    strcmp(I->sink[s].path, "-") == 0 ? "stdout" : I->sink[s].path,
					    strerror(errno));
	return 0;
}

/* The first byte of a source against --format: a .npy array fed to text
 * and text fed to .npy are named, with the flag that reads them. The byte
 * is put back (one byte of push-back works on a pipe too). */
static int check_format(struct infer *I, struct source *s, struct dl_error *err)
{
	if (s->looked)
		return 0;
	s->looked = 1;
	int c = getc(s->f);
	if (c == EOF)
		return 0;
	ungetc(c, s->f);
	if (c == 0x89 || c == 0xff)   /* \x89PNG, JPEG's \xff\xd8\xff */
		return dl_error_set(err, DL_EINPUT,
				    "%s: a %s image, not a .npy array; 'dlrun infer MODEL FILE...' "
				    "reads image files (through the model's data: image: pipeline)",
				    src_name(s), c == 0x89 ? "PNG" : "JPEG");
	if (I->text && c == 0x93)
		return dl_error_set(err, DL_EINPUT,
				    "%s: a .npy array, not text (it starts with \\x93NUMPY); "
				    "leave out --format text (or give --format npy) to read it",
				    src_name(s));
	if (!I->text && c != 0x93 && (strchr("0123456789+-.#,", c) || c == ' ' ||
				      c == '\t' || c == '\n' || c == '\r'))
		return dl_error_set(err, DL_EINPUT,
				    "%s: text, not a .npy array (it starts with '%s'); "
				    "--format text reads it",
				    src_name(s), c == '\n' || c == '\r' ? "\\n"
				    : c == '\t' ? "\\t" : (char[]){(char)c, 0});
	return 0;
}

/* Reads one step of npy arrays; returns 1, 0 at the end, or an error. */
static int read_npy_step(struct infer *I, struct dl_error *err)
{
	struct dl_graph *g = I->g;
	for (int i = 0; i < g->n_inputs; i++) {
		struct source *s = &I->src[I->src_of[i]];
		struct dl_npy_header h;
		int rc = check_format(I, s, err);
		if (rc == 0)
			rc = dl_npy_read_header(s->f, src_name(s), &h, err);
		if (rc < 0)
			return rc;
		if (rc == 0) {
			if (i == 0)
				return 0;
			return dl_error_set(err, DL_EINPUT,
					    "%s: the stream ended before the array for input '%s'",
					    src_name(s), g->inputs[i].name);
		}
		int is_float = h.dtype == DL_F32 || h.dtype == DL_F64 || h.dtype == DL_F16;
		if (g->inputs[i].is_int ? is_float : !is_float)
			return dl_error_set(err, DL_EINPUT,
					    "%s: the array for input '%s' holds %s; the model needs %s",
					    src_name(s), g->inputs[i].name,
					    is_float ? "floats" : "integers",
					    g->inputs[i].is_int ? "integers (dtype: int)" : "floats (<f4 or <f8)");
		I->streamed = g->n_inputs == 1 && I->batch > 0 && !h.fortran &&
			      h.shape.ndim > 0 && h.shape.d[0] > I->batch;
		if (I->streamed) {
			I->pending = h;
		} else {
			if ((rc = grow_floats(&I->in_data[i], &I->in_cap[i], h.numel, err)) != 0)
				return rc;
			if ((rc = dl_npy_read_f32(s->f, src_name(s), &h, h.numel, I->in_data[i],
						  err)) != 0)
				return rc;
		}
		I->in_shape[i] = h.shape;
		if (h.shape.ndim == 0) {
			I->in_shape[i].ndim = 1;
			I->in_shape[i].d[0] = 1;
		}
	}
	return 1;
}

/* Per-sample sizes of input i for text rows of the given width. */
static int text_shape(struct infer *I, int i, int64_t width, int64_t rows,
		      struct dl_error *err)
{
	const struct dl_input_spec *s = &I->g->inputs[i];
	struct dl_shape *sh = &I->in_shape[i];
	sh->ndim = s->ndim + 1;
	sh->d[0] = rows;
	int64_t fixed = 1;
	int sym = -1, n_sym = 0;
	for (int d = 0; d < s->ndim; d++) {
		if (s->sym[d]) {
			sym = d;
			n_sym++;
		} else {
			fixed *= s->d[d];
		}
		sh->d[d + 1] = s->d[d];
	}
	if (n_sym > 1)
		return dl_error_set(err, DL_EINPUT,
				    "input '%s' has several symbolic sizes; text rows cannot "
				    "tell them apart (use .npy)", s->name);
	if (n_sym == 1) {
		if (width % fixed)
			return dl_error_set(err, DL_EINPUT,
					    "%s: a row has %lld values, not a multiple of %lld for input '%s'",
					    src_name(&I->src[I->src_of[i]]), (long long)width,
					    (long long)fixed, s->name);
		sh->d[sym + 1] = width / fixed;
	}
	return 0;
}

static int read_text_step(struct infer *I, struct dl_error *err)
{
	struct dl_graph *g = I->g;
	int64_t rows0 = -1;
	int64_t want = I->batch > 0 ? I->batch : 1;
	for (int i = 0; i < g->n_inputs; i++) {
		struct source *s = &I->src[I->src_of[i]];
		const struct dl_input_spec *sp = &g->inputs[i];
		int64_t width = 1;
		for (int d = 0; d < sp->ndim; d++)
			width = sp->sym[d] ? -1 : width * sp->d[d];
		if (width < 0)
			width = 0; /* set from the first row */
		/* room for `want` rows; symbolic widths grow the buffer first */
		int64_t cap = width > 0 ? width * want : 1 << 16;
		int rc = check_format(I, s, err);
		if (rc == 0)
			rc = grow_floats(&I->in_data[i], &I->in_cap[i], cap, err);
		if (rc)
			return rc;
		s->text.ints = sp->is_int;
		/* cap_values is the most values one row may hold */
		int64_t got = dl_text_read_rows(&s->text, &width, (int64_t)I->in_cap[i] / want,
						I->in_data[i], want, err);
		if (got < 0)
			return (int)got;
		if (i == 0) {
			if (got == 0)
				return 0;
			rows0 = got;
		} else if (got != rows0) {
			return dl_error_set(err, DL_EINPUT,
					    "%s: %lld rows for input '%s' where '%s' had %lld",
					    src_name(s), (long long)got, sp->name,
					    g->inputs[0].name, (long long)rows0);
		}
		if ((rc = text_shape(I, i, width, got, err)) != 0)
			return rc;
		if (dl_shape_prod(&I->in_shape[i], 1, I->in_shape[i].ndim) != width)
			return dl_error_set(err, DL_EINPUT,
					    "%s: rows have %lld values; input '%s' needs %lld",
					    src_name(s), (long long)width, sp->name,
					    (long long)dl_shape_prod(&I->in_shape[i], 1, I->in_shape[i].ndim));
	}
	return 1;
}

static int alloc_state(struct infer *I, struct dl_error *err)
{
	int ni = I->g->n_inputs, no = I->g->n_outputs;
	I->in_data = calloc((size_t)ni, sizeof *I->in_data);
	I->in_cap = calloc((size_t)ni, sizeof *I->in_cap);
	I->in_shape = calloc((size_t)ni, sizeof *I->in_shape);
	I->chunk = calloc((size_t)ni, sizeof *I->chunk);
	I->chunk_ptr = calloc((size_t)ni, sizeof *I->chunk_ptr);
	I->out_data = calloc((size_t)no, sizeof *I->out_data);
	I->out_cap = calloc((size_t)no, sizeof *I->out_cap);
	I->out_shape = calloc((size_t)no, sizeof *I->out_shape);
	if (!I->in_data || !I->in_cap || !I->in_shape || !I->chunk ||
	    !I->chunk_ptr || !I->out_data || !I->out_cap || !I->out_shape)
		return dl_error_set(err, DL_ERUN, "out of memory");
	return 0;
}

static void free_state(struct infer *I, int ok)
{
	for (int s = 0; I->src && s < I->n_src; s++) {
		if (I->src[s].text_ready)
			dl_text_reader_free(&I->src[s].text);
		if (I->src[s].owned)
			fclose(I->src[s].f);
	}
	for (int s = 0; I->sink && s < I->n_sink; s++)
		if (I->sink[s].open && !ok)
			dl_atomic_abort(&I->sink[s].out);
	for (int i = 0; I->in_data && i < I->g->n_inputs; i++)
		free(I->in_data[i]);
	for (int k = 0; I->out_data && k < I->g->n_outputs; k++)
		free(I->out_data[k]);
	free(I->src);
	free(I->src_of);
	free(I->sink);
	free(I->sink_of);
	free(I->in_data);
	free(I->in_cap);
	free(I->in_shape);
	free(I->chunk);
	free(I->chunk_ptr);
	free(I->out_data);
	free(I->out_cap);
	free(I->out_shape);
	dl_session_free(I->s);
}

/* Image files as the input: one step per file, its outputs written as
 * arrays, or (--top, --json) as class lines. Frees I's state. */
static int infer_on_files(struct infer *I, char **files, int n_files, int top, int json,
			  char **outs, int n_outs, struct dl_error *err)
{
	struct infer_files F;
	int rc = infer_files_open(&F, I->g, files, n_files, top, json, err);
	if (rc) {
		free_state(I, 0);
		return rc;
	}
	int64_t per = (int64_t)F.c * F.h * F.w;
	rc = ensure_weights(I, err);
	if (rc == 0)
		rc = bind_sinks(I, outs, n_outs, err);
	if (rc == 0)
		rc = grow_floats(&I->in_data[0], &I->in_cap[0], per, err);
	while (rc == 0) {
		const char *path;
		int more = infer_files_next(&F, I->in_data[0], &path, err);
		if (more <= 0) {
			rc = more;
			break;
		}
		I->in_shape[0] = (struct dl_shape){4, {1, F.c, F.h, F.w}};
		rc = run_step(I, err);
		if (rc == 0 && (top || json)) {
			FILE *f = I->sink[I->sink_of[0]].out.f;
			rc = infer_files_print(&F, f, path, I->out_data[0],
					       dl_shape_numel(&I->out_shape[0]), err);
			if (rc == 0 && fflush(f) != 0)
				rc = dl_error_set(err, DL_ERUN, "write failed: %s", strerror(errno));
			if (rc && errno == EPIPE && f == stdout)
				rc = err->code = DL_EPIPE;   /* as `head` closing the pipe */
		} else if (rc == 0) {
			rc = write_outputs(I, err);
		}
	}
	for (int s = 0; rc == 0 && s < I->n_sink; s++) {
		rc = dl_atomic_commit(&I->sink[s].out, err);
		I->sink[s].open = rc != 0;
	}
	infer_files_close(&F);
	free_state(I, rc == 0);
	return rc;
}

static int infer_main(int argc, char **argv, struct dl_error *err)
{
	static const struct option opts[] = {
		{"weights", required_argument, NULL, 'w'},
		{"input", required_argument, NULL, 'i'},
		{"output", required_argument, NULL, 'o'},
		{"format", required_argument, NULL, 'f'},
		{"batch-size", required_argument, NULL, 'b'},
		{"threads", required_argument, NULL, 't'},
		{"ignore-extra", no_argument, NULL, 'X'},
		{"max-memory", required_argument, NULL, 'M'},
		{"top", required_argument, NULL, 'K'},
		{"json", no_argument, NULL, 'J'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	long long top = 0;
	int json = 0;
	struct infer I;
	memset(&I, 0, sizeof I);
	char **ins = calloc((size_t)argc + 1, sizeof *ins);
	char **outs = calloc((size_t)argc + 1, sizeof *outs);
	int n_ins = 0, n_outs = 0, rc = 0;
	const char *threads = NULL, *model = NULL, *max_memory = NULL;
	if (!ins || !outs) {
		free(ins);
		free(outs);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	int c;
	opterr = 0;
	while (rc == 0 && (c = getopt_long(argc, argv, ":w:i:o:f:b:t:h", opts, NULL)) != -1) {
		switch (c) {
		case 'w':
			I.wflag = optarg;
			break;
		case 'X':
			I.ignore_extra = 1;
			break;
		case 'i':
			ins[n_ins++] = optarg;
			break;
		case 'o':
			outs[n_outs++] = optarg;
			break;
		case 'f':
			if (strcmp(optarg, "npy") == 0)
				I.text = 0;
			else if (strcmp(optarg, "text") == 0)
				I.text = 1;
			else
				rc = dl_error_set(err, DL_EINPUT,
						  "infer: --format is npy or text, got '%s'", optarg);
			break;
		case 'b':
			rc = verb_int("infer", "--batch-size", optarg, 1, (long long)1 << 40,
				      &I.batch, err);
			break;
		case 't':
			threads = optarg;
			break;
		case 'M':
			max_memory = optarg;
			break;
		case 'K':
			rc = verb_int("infer", "--top", optarg, 1, 1 << 30, &top, err);
			break;
		case 'J':
			json = 1;
			break;
		case 'h':
			verb_usage(&verb_infer);
			free(ins);
			free(outs);
			return 0;
		default:
			rc = verb_bad_option("infer", c, argv, err);
		}
	}
	/* operands after the model: image files and folders */
	int n_files = rc == 0 && optind + 1 < argc ? argc - optind - 1 : 0;
	if (rc == 0)
		rc = verb_model_arg("infer", argc - n_files, argv, &model, err);
	if (rc == 0 && (top || json) && !n_files)
		rc = dl_error_set(err, DL_EINPUT, "infer: --top and --json are for image files "
				  "(dlrun infer MODEL a.jpg b.png DIR/ --top 5)");
	if (rc == 0 && n_files && (n_ins || I.text))
		rc = dl_error_set(err, DL_EINPUT, "infer: image files (here '%s') are the model's "
				  "input; -i and --format text do not go with them",
				  argv[optind + 1]);
	if (rc == 0)
		rc = verb_threads("infer", threads, err);
	if (rc == 0)
		rc = verb_max_memory("infer", max_memory, err);
	if (rc == 0)
		rc = dl_session_open(&I.s, model, I.wflag, I.ignore_extra, err);
	if (rc == 0) {
		I.g = I.s->g;
		verb_session_env(I.s);
	}
	if (rc) {
		free(ins);
		free(outs);
		return rc;
	}
	rc = alloc_state(&I, err);
	/* Weights before any input is read, when their shapes are known (the
	 * sources are opened, not read, first: -w - must know stdin is free) */
	if (rc == 0 && n_files) {
		rc = infer_on_files(&I, argv + optind + 1, n_files, (int)top, json, outs, n_outs,
				    err);
		free(ins);
		free(outs);
		return rc;
	}
	if (rc == 0)
		rc = bind_sources(&I, ins, n_ins, err);
	if (rc == 0)
		rc = ensure_weights(&I, err);
	if (rc == 0)
		rc = bind_sinks(&I, outs, n_outs, err);
	while (rc == 0) {
		int more = I.text ? read_text_step(&I, err) : read_npy_step(&I, err);
		if (more <= 0) {
			rc = more;
			break;
		}
		rc = run_step(&I, err);
		if (rc == 0)
			rc = write_outputs(&I, err);
	}
	for (int s = 0; rc == 0 && s < I.n_sink; s++) {
		rc = dl_atomic_commit(&I.sink[s].out, err);
		I.sink[s].open = rc != 0;
	}
	free_state(&I, rc == 0);
	free(ins);
	free(outs);
	return rc;
}

const struct verb verb_infer = {
	"infer",
	"run a model on input arrays (a filter: stdin to stdout)",
	"usage: dlrun infer MODEL.yaml [-w WEIGHTS] [-i [NAME=]PATH]... [-o [NAME=]PATH]...\n"
	"                  [--format npy|text] [--batch-size N] [--threads N]\n"
	"       dlrun infer MODEL.yaml IMAGE|DIR... [--top K] [--json] [-w WEIGHTS]\n"
	"\n"
	"Reads one array per model input per step (.npy back to back on stdin by\n"
	"default), runs the model, writes one array per output and flushes.\n"
	"\n"
	"  -w, --weights PATH     weights (default: the model's weights: key, else\n"
	"                         MODEL with .yaml replaced by .safetensors)\n"
	"      --ignore-extra     skip (and count) weights the model does not use\n"
	"  -i, --input [NAME=]PATH  read input NAME (or the next input) from PATH\n"
	"  -o, --output [NAME=]PATH write output NAME (or all outputs) to PATH\n"
	"  -f, --format npy|text  tensor format (default npy); text is one sample\n"
	"                         per line, grouped into steps of --batch-size\n"
	"  -b, --batch-size N     compute in chunks of N samples (same results)\n"
	"  -t, --threads N        BLAS and op threads (default: all cores)\n"
	"      --max-memory SIZE  refuse a plan needing more (default: 80% of RAM)\n"
	"      --top K            image files: PATH<TAB>CLASS<TAB>PROB lines of the K\n"
	"                         largest softmax probabilities (classes: data: classes)\n"
	"      --json             image files: one JSON object per file\n"
	"  -h, --help             this help\n",
	infer_main,
};
