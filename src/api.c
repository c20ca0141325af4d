/* libdlrun's public interface (dlrun.h) over the engine: one struct
 * dlrun_model holds a session (engine/session.h: the graph, its weights,
 * its plan, packed weights and decoding state, the same path as the
 * dlrun program's), its own thread state and, once training began, the
 * optimizer and one training step (src/train/step.c, as `dlrun train`). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "dlrun.h"
#include "engine/generate.h"
#include "engine/graph.h"
#include "engine/session.h"
#include "engine/threads.h"
#include "model/model.h"
#include "ops/registry.h"
#include "train/step.h"

struct dlrun_model {
	struct dl_session *s;
	struct dl_graph *g;        /* s->g */
	struct dl_threads th;
	struct dl_rng rng;
	struct dl_shape *in_shape; /* [n_inputs] */
	float **in_ptr;            /* [n_inputs] */
	float **out_buf;           /* [n_outputs] library-owned outputs */
	size_t *out_cap;

	int training;              /* dlrun_train_begin succeeded */
	int planned_train;         /* the plan in place is a training one */
	/* decoding step by step (dlrun_step_*) */
	int64_t *pos;              /* [rows] positions fed per sequence */
	int64_t rows;
	float *tok;                /* one call's ids as floats */
	size_t tok_cap;
	struct dl_step step;
	struct dl_optim opt;
	struct dl_range *ranges;
	int n_ranges;
	float **dout;              /* [n_outputs]: the loss output's entry is
	                            * the plan's own gradient slot
	                            * (dl_step_use_plan_slot), the others NULL */
	int64_t *ids;              /* class ids of one batch */
	int64_t ids_cap;
	double lr;
	int64_t steps;
};

static int api_error(struct dlrun_error *e, const struct dl_error *err)
{
	int code = err->code ? err->code : DL_ERUN;
	if (e) {
		e->code = code;
		snprintf(e->message, sizeof e->message, "%s", err->msg);
	}
	return code;
}

static int fail(struct dlrun_error *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fail(struct dlrun_error *e, int code, const char *fmt, ...)
{
	if (e) {
		va_list ap;
		va_start(ap, fmt);
		e->code = code;
		vsnprintf(e->message, sizeof e->message, fmt, ap);
		va_end(ap);
	}
	return code;
}

static void ok(struct dlrun_error *e)
{
	if (e) {
		e->code = DLRUN_OK;
		e->message[0] = '\0';
	}
}

/* The registry builds its table on first use: once, before any thread
 * can race on it. */
static void init_once(void)
{
	(void)dl_op_all();
}

const char *dlrun_version(void)
{
	return PACKAGE_VERSION;
}

void dlrun_close(dlrun_model *m)
{
	if (!m)
		return;
	for (int k = 0; m->out_buf && k < m->g->n_outputs; k++)
		free(m->out_buf[k]);
	free(m->out_buf);
	free(m->out_cap);
	free(m->dout);
	free(m->ids);
	free(m->in_shape);
	free(m->in_ptr);
	free(m->ranges);
	free(m->pos);
	free(m->tok);
	dl_optim_free(&m->opt);
	dl_session_free(m->s);
	free(m);
}

int dlrun_open(dlrun_model **out, const char *model_path,
	       const char *weights_path, struct dlrun_error *e)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, init_once);
	if (!out)
		return fail(e, DLRUN_EINPUT, "dlrun_open: no place for the model");
	*out = NULL;
	if (!model_path)
		return fail(e, DLRUN_EINPUT, "dlrun_open: no model path");
	dlrun_model *m = calloc(1, sizeof *m);
	if (!m)
		return fail(e, DLRUN_ERUN, "out of memory");
	struct dl_error err = {0};
	dl_threads_init(&m->th);
	dl_threads_use(&m->th);
	dl_rng_seed(&m->rng, 0);
	int rc = dl_session_open(&m->s, model_path, weights_path, 0, &err);
	if (rc == 0) {
		m->g = m->s->g;
		int ni = m->g->n_inputs, no = m->g->n_outputs;
		m->in_shape = calloc((size_t)ni + 1, sizeof *m->in_shape);
		m->in_ptr = calloc((size_t)ni + 1, sizeof *m->in_ptr);
		m->out_buf = calloc((size_t)no + 1, sizeof *m->out_buf);
		m->out_cap = calloc((size_t)no + 1, sizeof *m->out_cap);
		m->dout = calloc((size_t)no + 1, sizeof *m->dout);
		if (!m->in_shape || !m->in_ptr || !m->out_buf || !m->out_cap || !m->dout)
			rc = dl_error_set(&err, DL_ERUN, "out of memory");
	}
	if (rc == 0)
		rc = dl_session_load_weights(m->s, &err);
	dl_threads_use(NULL);
	if (rc) {
		dlrun_close(m);
		return api_error(e, &err);
	}
	*out = m;
	ok(e);
	return 0;
}

int dlrun_set_threads(dlrun_model *m, int n, struct dlrun_error *e)
{
	if (!m)
		return fail(e, DLRUN_EINPUT, "dlrun_set_threads: no model");
	dl_threads_use(&m->th);
	dl_set_threads(n);
	dl_threads_use(NULL);
	ok(e);
	return 0;
}

int dlrun_n_inputs(const dlrun_model *m)
{
	return m ? m->g->n_inputs : 0;
}

int dlrun_n_outputs(const dlrun_model *m)
{
	return m ? m->g->n_outputs : 0;
}

const char *dlrun_input_name(const dlrun_model *m, int i)
{
	return m && i >= 0 && i < m->g->n_inputs ? m->g->inputs[i].name : NULL;
}

const char *dlrun_output_name(const dlrun_model *m, int k)
{
	return m && k >= 0 && k < m->g->n_outputs ? m->g->output_names[k] : NULL;
}

int dlrun_input_shape(const dlrun_model *m, int i, int64_t *dims, int max)
{
	if (!m || i < 0 || i >= m->g->n_inputs)
		return DLRUN_EINPUT;
	const struct dl_input_spec *s = &m->g->inputs[i];
	for (int d = 0; d < s->ndim && d < max; d++)
		dims[d] = s->d[d];
	return s->ndim;
}

int dlrun_output_shape(const dlrun_model *m, int k, int64_t *dims, int max)
{
	if (!m || k < 0 || k >= m->g->n_outputs)
		return DLRUN_EINPUT;
	const struct dl_graph *g = m->g;
	const struct dl_shape *s = &g->values[g->outputs[k]].shape;
	if (!g->shapes_ready)
		return -1;
	for (int d = 1; d < s->ndim && d - 1 < max; d++)
		dims[d - 1] = s->d[d];
	return s->ndim - 1;
}

/* Checks the caller's inputs and plans the graph for their shapes. */
static int prepare(dlrun_model *m, const struct dlrun_tensor *in, int n_in, int train,
		   struct dl_error *err)
{
	struct dl_graph *g = m->g;
	if (n_in != g->n_inputs)
		return dl_error_set(err, DL_EINPUT, "%s: the model has %d input%s, %d given",
				    g->file, g->n_inputs, g->n_inputs == 1 ? "" : "s", n_in);
	if (g->n_inputs > 0 && !in)
		return dl_error_set(err, DL_EINPUT, "%s: no inputs given", g->file);
	for (int i = 0; i < n_in; i++) {
		if (in[i].ndim < 1 || in[i].ndim > DL_MAX_DIMS)
			return dl_error_set(err, DL_EINPUT, "input '%s': rank %d; give the batch "
					    "and %d per-sample dimensions", g->inputs[i].name,
					    in[i].ndim, g->inputs[i].ndim);
		struct dl_shape s = dl_shape_make(in[i].ndim, in[i].dims);
		if (dl_shape_numel(&s) < 0)
			return dl_error_set(err, DL_EINPUT, "input '%s': negative or too large sizes",
					    g->inputs[i].name);
		if (!in[i].data && dl_shape_numel(&s) > 0)
			return dl_error_set(err, DL_EINPUT, "input '%s': no data", g->inputs[i].name);
		m->in_shape[i] = s;
		m->in_ptr[i] = in[i].data;
	}
	int rc = dl_session_prepare(m->s, m->in_shape, train, err);
	if (rc == 0)
		m->planned_train = train;
	return rc;
}

int dlrun_run(dlrun_model *m, const struct dlrun_tensor *in, int n_in,
	      struct dlrun_tensor *out, int n_out, struct dlrun_error *e)
{
	if (!m)
		return fail(e, DLRUN_EINPUT, "dlrun_run: no model");
	struct dl_graph *g = m->g;
	if (n_out != g->n_outputs || (n_out > 0 && !out))
		return fail(e, DLRUN_EINPUT, "%s: the model has %d output%s, room for %d given",
			    g->file, g->n_outputs, g->n_outputs == 1 ? "" : "s", n_out);
	struct dl_error err = {0};
	dl_threads_use(&m->th);
	int rc = prepare(m, in, n_in, 0, &err);
	for (int k = 0; rc == 0 && k < n_out; k++) {
		int64_t n = dl_shape_numel(&g->values[g->outputs[k]].shape);
		if (out[k].data && out[k].capacity < (size_t)n)
			rc = dl_error_set(&err, DL_EINPUT, "output '%s' needs room for %lld floats, "
					  "the buffer has %zu", g->output_names[k], (long long)n,
					  out[k].capacity);
	}
	if (rc == 0)
		rc = dl_session_forward(m->s, m->in_ptr, &err);
	if (rc == 0) {
		for (int k = 0; rc == 0 && k < n_out; k++) {
			const struct dl_value *v = &g->values[g->outputs[k]];
			size_t n = (size_t)dl_shape_numel(&v->shape);
			if (!out[k].data) {
				if (n > m->out_cap[k]) {
					float *p = realloc(m->out_buf[k], n * sizeof *p + 1);
					if (!p) {
						rc = dl_error_set(&err, DL_ERUN, "out of memory");
						break;
					}
					m->out_buf[k] = p;
					m->out_cap[k] = n;
				}
				out[k].data = m->out_buf[k];
				out[k].capacity = m->out_cap[k];
			}
			memcpy(out[k].data, v->data, n * sizeof(float));
			out[k].ndim = v->shape.ndim;
			for (int d = 0; d < v->shape.ndim; d++)
				out[k].dims[d] = v->shape.d[d];
		}
	}
	dl_threads_use(NULL);
	if (rc)
		return api_error(e, &err);
	ok(e);
	return 0;
}

int dlrun_train_begin(dlrun_model *m, const struct dlrun_train_options *o,
		      struct dlrun_error *e)
{
	if (!m)
		return fail(e, DLRUN_EINPUT, "dlrun_train_begin: no model");
	struct dlrun_train_options def = {0};
	if (!o)
		o = &def;
	struct dl_graph *g = m->g;
	struct dl_error err = {0};
	enum dl_optim_kind kind = DL_OPTIM_ADAM;
	enum dl_loss loss = DL_LOSS_CROSS_ENTROPY;
	int rc = 0;
	if (o->optimizer)
		rc = dl_optim_from_name(o->optimizer, &kind, &err);
	if (rc == 0 && o->loss)
		rc = dl_loss_from_name(o->loss, &loss, &err);
	int out = 0;
	if (rc == 0 && o->loss_output && (out = dl_step_output(g, o->loss_output)) < 0)
		rc = dl_error_set(&err, DL_EINPUT, "%s: no output named '%s'", g->file,
				  o->loss_output);
	if (rc == 0 && !g->params_ready)
		rc = dl_error_set(&err, DL_EINPUT, "%s: the model has symbolic sizes: run one "
				  "batch (dlrun_run) before training", g->file);
	dl_threads_use(&m->th);
	if (rc == 0 && !m->training)
		rc = dl_session_unfix(m->s, &err);
	if (rc == 0 && !m->training)
		rc = dl_graph_train_setup(g, &err);
	if (rc == 0 && !m->training)
		rc = dl_train_ranges(g, &m->ranges, &m->n_ranges, &err);
	if (rc == 0) {
		dl_optim_free(&m->opt);
		struct dl_optim_config oc = dl_optim_defaults(kind);
		rc = dl_optim_init(&m->opt, &oc, g->n_param_floats, m->ranges, m->n_ranges, &err);
	}
	dl_threads_use(NULL);
	if (rc)
		return api_error(e, &err);
	memset(&m->step, 0, sizeof m->step);
	m->step.g = g;
	m->step.out = out;
	m->step.loss = loss;
	m->step.ignore_index = -100;
	m->step.dout = m->dout;
	m->step.opt = &m->opt;
	m->step.ranges = m->ranges;
	m->step.n_ranges = m->n_ranges;
	m->lr = o->lr > 0 ? o->lr : 1e-3;
	m->steps = 0;
	dl_rng_seed(&m->rng, o->seed ^ 0x5deece66dULL);
	m->training = 1;
	ok(e);
	return 0;
}

int dlrun_train_step(dlrun_model *m, const struct dlrun_tensor *in, int n_in,
		     const struct dlrun_tensor *labels, double *loss,
		     struct dlrun_error *e)
{
	if (!m)
		return fail(e, DLRUN_EINPUT, "dlrun_train_step: no model");
	if (!m->training)
		return fail(e, DLRUN_EINPUT, "dlrun_train_step: call dlrun_train_begin first");
	if (!labels || !labels->data || labels->ndim < 1 || labels->ndim > DLRUN_MAX_DIMS)
		return fail(e, DLRUN_EINPUT, "dlrun_train_step: no labels");
	struct dl_graph *g = m->g;
	struct dl_error err = {0};
	dl_threads_use(&m->th);
	int rc = prepare(m, in, n_in, 1, &err);
	if (rc == 0)
		rc = dl_graph_check_ids(g, m->in_ptr, &err);
	struct dl_batch b = {0};
	int64_t rows = 0, classes = 0;
	if (rc == 0) {
		/* the loss writes its gradient into the plan's slot, as
		 * dlrun train's (src/train/loop.c): no logits-sized buffer of
		 * our own; the slot is the current plan's, so set at each step */
		dl_step_use_plan_slot(&m->step);
		const struct dl_shape *os = &g->values[g->outputs[m->step.out]].shape;
		b.n = os->d[0];
		b.in = m->in_ptr;
		b.yshape = dl_shape_make(labels->ndim, labels->dims);
		rc = dl_loss_shape(m->step.loss, os, &b.yshape, &rows, &classes, &err);
	}
	if (rc == 0 && dl_loss_takes_ids(m->step.loss)) {
		int64_t n = dl_shape_numel(&b.yshape);
		if (n > m->ids_cap) {
			int64_t *p = realloc(m->ids, (size_t)(n + 1) * sizeof *p);
			if (!p)
				rc = dl_error_set(&err, DL_ERUN, "out of memory");
			else {
				m->ids = p;
				m->ids_cap = n;
			}
		}
		for (int64_t i = 0; rc == 0 && i < n; i++) {
			float v = labels->data[i];
			if (v != (float)(int64_t)v)
				rc = dl_error_set(&err, DL_EINPUT, "label %lld is %g, not a class id",
						  (long long)i, (double)v);
			else
				m->ids[i] = (int64_t)v;
		}
		if (rc == 0)
			rc = dl_loss_check_labels(m->ids, n, classes, m->step.ignore_index,
						  "labels", &err);
		b.ids = m->ids;
	} else {
		b.targets = labels->data;
	}
	double l = 0;
	if (rc == 0)
		rc = dl_session_restore(m->s, &err);
	if (rc == 0) {
		struct dl_ctx ctx = {.train = 1, .rng = &m->rng};
		rc = dl_train_step(&m->step, &b, m->lr, m->steps + 1, &ctx, &l, &err);
		if (rc == 0)
			m->steps++;
	}
	dl_threads_use(NULL);
	if (rc)
		return api_error(e, &err);
	if (loss)
		*loss = l;
	ok(e);
	return 0;
}

int dlrun_save_weights(dlrun_model *m, const char *path, struct dlrun_error *e)
{
	if (!m || !path)
		return fail(e, DLRUN_EINPUT, "dlrun_save_weights: no model or path");
	if (!m->g->params_ready)
		return fail(e, DLRUN_EINPUT, "%s: the model has symbolic sizes: run one batch "
			    "(dlrun_run) before saving its weights", m->g->file);
	struct dl_error err = {0};
	if (dl_session_restore(m->s, &err) != 0)
		return api_error(e, &err);
	if (dl_model_save_weights(m->g, path, NULL, 0, &err) != 0)
		return api_error(e, &err);
	ok(e);
	return 0;
}

/* ---- decoding step by step ---- */

void dlrun_step_end(dlrun_model *m)
{
	if (!m)
		return;
	dl_session_step_end(m->s);
	free(m->pos);
	m->pos = NULL;
	m->rows = 0;
}

int dlrun_step_begin(dlrun_model *m, int rows, int64_t max_len, struct dlrun_error *e)
{
	if (!m)
		return fail(e, DLRUN_EINPUT, "dlrun_step_begin: no model");
	dlrun_step_end(m);
	int tok = dl_session_token_input(m->s);
	if (tok < 0)
		return fail(e, DLRUN_EINPUT, "%s: no token input: stepping needs an input with "
			    "dtype: int and a symbolic length", m->g->file);
	int64_t longest = dl_model_max_len(m->g);
	if (max_len <= 0)
		max_len = longest > 0 ? longest : 1024;
	if (rows < 1)
		return fail(e, DLRUN_EINPUT, "dlrun_step_begin: %d sequences", rows);
	if (longest > 0 && max_len > longest)
		return fail(e, DLRUN_EINPUT, "%s: max_len %lld is longer than the model's %lld "
			    "positions", m->g->file, (long long)max_len, (long long)longest);
	m->pos = calloc((size_t)rows, sizeof *m->pos);
	if (!m->pos)
		return fail(e, DLRUN_ERUN, "out of memory");
	struct dl_error err = {0};
	int rc = dl_session_step_begin(m->s, tok, rows, max_len, &err);
	if (rc) {
		free(m->pos);
		m->pos = NULL;
		return api_error(e, &err);
	}
	m->rows = rows;
	ok(e);
	return 0;
}

int dlrun_step_reset(dlrun_model *m, int row, struct dlrun_error *e)
{
	if (!m || row < 0 || row >= m->rows)
		return fail(e, DLRUN_EINPUT, "dlrun_step_reset: no sequence %d", row);
	m->pos[row] = 0;
	ok(e);
	return 0;
}

int dlrun_step(dlrun_model *m, int row, const int64_t *ids, int n,
	       const struct dlrun_tensor *in, int n_in, float *out,
	       size_t capacity, struct dlrun_error *e)
{
	if (!m)
		return fail(e, DLRUN_EINPUT, "dlrun_step: no model");
	struct dl_graph *g = m->g;
	if (!m->pos)
		return fail(e, DLRUN_EINPUT, "dlrun_step: call dlrun_step_begin first");
	if (row < 0 || row >= m->rows)
		return fail(e, DLRUN_EINPUT, "dlrun_step: no sequence %d of %lld", row,
			    (long long)m->rows);
	if (n < 1 || !ids)
		return fail(e, DLRUN_EINPUT, "dlrun_step: no ids");
	int tok = m->s->tok;
	if (g->n_inputs > 1 && (n_in != g->n_inputs || !in))
		return fail(e, DLRUN_EINPUT, "%s: the model has %d inputs; give them all (the "
			    "token input's entry is ignored)", g->file, g->n_inputs);
	if ((size_t)n > m->tok_cap) {
		float *p = realloc(m->tok, (size_t)n * sizeof *p);
		if (!p)
			return fail(e, DLRUN_ERUN, "out of memory");
		m->tok = p;
		m->tok_cap = (size_t)n;
	}
	for (int t = 0; t < n; t++)
		m->tok[t] = (float)ids[t];
	struct dl_error err = {0};
	int rc = 0;
	for (int i = 0; i < g->n_inputs; i++) {
		if (i == tok) {
			int64_t d[2] = {1, n};
			m->in_shape[i] = dl_shape_make(2, d);
			m->in_ptr[i] = m->tok;
			continue;
		}
		if (in[i].ndim < 1 || in[i].ndim > DL_MAX_DIMS || !in[i].data || in[i].dims[0] != 1) {
			rc = dl_error_set(&err, DL_EINPUT, "input '%s': give one sample (batch 1)",
					  g->inputs[i].name);
			break;
		}
		m->in_shape[i] = dl_shape_make(in[i].ndim, in[i].dims);
		m->in_ptr[i] = in[i].data;
	}
	dl_threads_use(&m->th);
	if (rc == 0)
		rc = dl_session_step(m->s, m->in_shape, m->in_ptr, row, &m->pos[row], &err);
	if (rc == 0) {
		const struct dl_value *v = &g->values[g->outputs[0]];
		int64_t per = v->shape.ndim >= 3 ? v->shape.d[v->shape.ndim - 1] : 0;
		if (v->shape.ndim < 3 || m->s->out_axis[0] != 2)
			rc = dl_error_set(&err, DL_EINPUT, "%s: output '%s' is not [T, V] over the "
					  "token positions", g->file, g->output_names[0]);
		else if (out && capacity < (size_t)per)
			rc = dl_error_set(&err, DL_EINPUT, "output '%s' needs room for %lld floats, "
					  "the buffer has %zu", g->output_names[0], (long long)per,
					  capacity);
		else if (out)
			memcpy(out, v->data + (int64_t)(n - 1) * per, (size_t)per * sizeof(float));
		if (rc == 0)
			m->pos[row] += n;
	}
	dl_threads_use(NULL);
	if (rc)
		return api_error(e, &err);
	ok(e);
	return 0;
}

int dlrun_generate(dlrun_model *m, const int64_t *prompt, size_t n,
		   const struct dlrun_tensor *in, int n_in,
		   const struct dlrun_generate_options *go, int64_t *out,
		   size_t capacity, size_t *n_out, struct dlrun_error *e)
{
	if (!m)
		return fail(e, DLRUN_EINPUT, "dlrun_generate: no model");
	struct dl_graph *g = m->g;
	struct dlrun_generate_options def = {0};
	if (!go)
		go = &def;
	int tok = dl_session_token_input(m->s);
	if (tok < 0)
		return fail(e, DLRUN_EINPUT, "%s: no token input: generation needs an input with "
			    "dtype: int and a symbolic length", g->file);
	if (!prompt || n < 1)
		return fail(e, DLRUN_EINPUT, "dlrun_generate: the prompt is empty");
	if (g->n_inputs > 1 && (n_in != g->n_inputs || !in))
		return fail(e, DLRUN_EINPUT, "%s: the model has %d inputs; give them all (the "
			    "token input's entry is ignored)", g->file, g->n_inputs);
	struct dl_gen_opts o = {
		.max_new = go->max_new_tokens > 0 ? go->max_new_tokens : 100,
		.greedy = go->greedy,
		.temperature = go->temperature > 0 ? go->temperature : 1.0,
		.top_k = go->top_k > 0 ? go->top_k : 0,
		.top_p = go->top_p > 0 && go->top_p < 1 ? go->top_p : 1.0,
		.seed = go->seed,
		.beams = go->beams,
		.length_penalty = go->set_lp || go->length_penalty != 0 ? go->length_penalty : 1.0,
		.eos = go->eos >= 0 ? go->eos : -1,
		.context = go->context > 0 ? go->context : dl_model_max_len(g),
	};
	struct dl_error err = {0};
	int rc = 0;
	for (int i = 0; i < g->n_inputs; i++) {
		if (i == tok)
			continue;
		if (in[i].ndim < 1 || in[i].ndim > DL_MAX_DIMS || !in[i].data || in[i].dims[0] != 1)
			return fail(e, DLRUN_EINPUT, "input '%s': give one sample (batch 1)",
				    g->inputs[i].name);
		m->in_shape[i] = dl_shape_make(in[i].ndim, in[i].dims);
		m->in_ptr[i] = in[i].data;
	}
	for (size_t t = 0; t < n && rc == 0; t++) {
		float f = (float)prompt[t];
		rc = dl_graph_check_input_ids(g, tok, &f, 1, "prompt", &err);
	}
	struct dl_gen_result r = {0};
	dl_threads_use(&m->th);
	dlrun_step_end(m);
	if (rc == 0)
		rc = dl_generate(m->s, tok, 1, &prompt, &n, m->in_ptr, m->in_shape, &o, &r, &err);
	dl_threads_use(NULL);
	if (rc == 0 && out && capacity < r.n)
		rc = dl_error_set(&err, DL_EINPUT, "dlrun_generate: %zu new tokens, room for %zu",
				  r.n, capacity);
	if (rc == 0) {
		if (out)
			memcpy(out, r.ids, r.n * sizeof *out);
		if (n_out)
			*n_out = r.n;
	}
	dl_gen_result_free(&r);
	if (rc)
		return api_error(e, &err);
	ok(e);
	return 0;
}
