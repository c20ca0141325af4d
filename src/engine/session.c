/* The session (engine/session.h): the one path from a loaded model and its
 * inputs to its outputs, shared by every verb and the library. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/session.h"
#include "engine/stepper.h"
#include "engine/xwt.h"
#include "model/model.h"

int dl_session_wrap(struct dl_session **out, struct dl_graph *g,
		    const char *weights, int ignore_extra, struct dl_error *err)
{
	*out = NULL;
	struct dl_session *s = calloc(1, sizeof *s);
	if (!s || (weights && !(s->weights = strdup(weights)))) {
		free(s);
		dl_graph_free(g);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	s->g = g;
	s->ignore_extra = ignore_extra;
	s->fixed = 1;
	s->fuse = 1;
	s->pack = 1;
	s->tok = -1;
	dl_rng_seed(&s->rng, 0);
	*out = s;
	return 0;
}

int dl_session_open(struct dl_session **out, const char *path,
		    const char *weights, int ignore_extra, struct dl_error *err)
{
	struct dl_graph *g;
	*out = NULL;
	int rc = dl_model_load(&g, path, err);
	if (rc)
		return rc;
	return dl_session_wrap(out, g, weights, ignore_extra, err);
}

void dl_session_free(struct dl_session *s)
{
	if (!s)
		return;
	dl_session_step_end(s);
	dl_xwt_set_free(s->xwt);
	dl_graph_free(s->g);
	free(s->weights);
	free(s);
}

int dl_session_load_weights(struct dl_session *s, struct dl_error *err)
{
	struct dl_graph *g = s->g;
	if (s->weights_loaded || !g->params_ready)
		return 0;
	int64_t buffers, params = dl_model_count_params(g, &buffers);
	int rc = 0;
	if (s->weights) {
		rc = dl_model_load_weights_ext(g, s->weights, s->ignore_extra,
					       &s->n_ignored, err);
	} else if (params + buffers > 0) {
		char *path = dl_model_default_weights(g);
		if (!path)
			return dl_error_set(err, DL_ERUN, "out of memory");
		if (access(path, F_OK) != 0)
			rc = dl_error_set(err, DL_EINPUT,
					  "%s: no weights file (%s); make one with 'dlrun init %s -o %s' "
					  "or train one, or give a weights path (-w WEIGHTS)",
					  g->file, path, g->file, path);
		else
			rc = dl_model_load_weights_ext(g, path, s->ignore_extra,
						       &s->n_ignored, err);
		if (rc == 0) {
			s->weights = path;   /* the path it came from, for messages */
			path = NULL;
		}
		free(path);
	}
	if (rc == 0)
		s->weights_loaded = 1;
	return rc;
}

int dl_session_prepare(struct dl_session *s, const struct dl_shape *in,
		       int train, struct dl_error *err)
{
	struct dl_graph *g = s->g;
	int rc = dl_graph_infer(g, in, err);
	if (rc == 0)
		rc = dl_session_load_weights(s, err);
	if (rc == 0) {
		g->fuse = !train && s->fixed && s->fuse;
		rc = dl_graph_plan(g, train, err);
	}
	return rc;
}

static int forward(struct dl_session *s, float *const *in,
		   const struct dl_step_call *step, struct dl_error *err)
{
	struct dl_graph *g = s->g;
	int rc = dl_graph_check_ids(g, in, err);
	if (rc)
		return rc;
	if (s->pack && !s->xwt)
		s->xwt = dl_xwt_set_new(g);
	struct dl_ctx ctx = {.train = 0, .rng = &s->rng,
			      .fixed_weights = s->fixed, .fuse = g->fuse,
			      .xwt = s->pack ? s->xwt : NULL, .step = step};
	dl_graph_forward(g, in, &ctx);
	return 0;
}

int dl_session_forward(struct dl_session *s, float *const *in,
		       struct dl_error *err)
{
	return forward(s, in, NULL, err);
}

int dl_session_run(struct dl_session *s, const struct dl_shape *shape,
		   float *const *in, struct dl_error *err)
{
	int rc = dl_session_prepare(s, shape, 0, err);
	return rc ? rc : dl_session_forward(s, in, err);
}

int dl_session_restore(struct dl_session *s, struct dl_error *err)
{
	if (dl_xwt_restore(s->xwt) != 0)
		return dl_error_set(err, DL_ERUN, "%s: out of memory", s->g->file);
	return 0;
}

int dl_session_unfix(struct dl_session *s, struct dl_error *err)
{
	s->fixed = 0;
	s->g->fuse = 0;
	return dl_session_restore(s, err);
}

int dl_graph_check_input_ids(const struct dl_graph *g, int v, const float *ids,
			     int64_t count, const char *where, struct dl_error *err)
{
	for (int i = 0; i < g->n_nodes; i++) {
		const struct dl_node *n = &g->nodes[i];
		if (!(n->op->flags & DL_OP_IDS) || n->n_in < 1 || n->in[0] != v ||
		    n->n_params < 1)
			continue;
		int64_t vocab = n->params[0].shape.d[0];
		for (int64_t j = 0; j < count; j++) {
			float id = ids[j];
			if (!(id >= 0 && id < (float)vocab && id == floorf(id)))
				return dl_error_set(err, DL_EINPUT,
						    "%s%s%s:%d:%d: %s '%s': token id %.9g of input "
						    "'%s' is out of range for its vocabulary of %lld "
						    "(num_embeddings)", where ? where : "",
						    where ? ": " : "", n->file, n->line, n->col,
						    n->op->name, n->scope, (double)id,
						    g->inputs[v].name, (long long)vocab);
		}
	}
	return 0;
}

int dl_graph_check_ids(const struct dl_graph *g, float *const *in,
		       struct dl_error *err)
{
	for (int v = 0; v < g->n_inputs; v++) {
		int rc = dl_graph_check_input_ids(g, v, in[v],
						  dl_shape_numel(&g->values[v].shape),
						  NULL, err);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- stepping ---- */

int dl_session_token_input(const struct dl_session *s)
{
	const struct dl_graph *g = s->g;
	for (int i = 0; i < g->n_inputs; i++)
		if (g->inputs[i].is_int && g->inputs[i].ndim == 1 &&
		    g->inputs[i].sym[0])
			return i;
	return -1;
}

void dl_session_step_end(struct dl_session *s)
{
	if (!s)
		return;
	if (s->stepping)
		dl_graph_step_clear(s->g);
	free(s->state);
	free(s->in_axis);
	free(s->out_axis);
	free(s->konst_off);
	free(s->konst);
	s->state = NULL;
	s->in_axis = s->out_axis = NULL;
	s->konst_off = NULL;
	s->konst = NULL;
	s->konst_floats = 0;
	s->stepping = 0;
	s->tok = -1;
}

int dl_session_step_begin(struct dl_session *s, int tok, int64_t rows,
			  int64_t max_len, struct dl_error *err)
{
	struct dl_graph *g = s->g;
	dl_session_step_end(s);
	if (tok < 0 || tok >= g->n_inputs)
		return dl_error_set(err, DL_EINPUT, "%s: no token input to step on", g->file);
	if (rows < 1 || max_len < 1)
		return dl_error_set(err, DL_EINPUT, "%s: nothing to step (%lld sequences of "
				    "%lld positions)", g->file, (long long)rows,
				    (long long)max_len);
	s->in_axis = calloc((size_t)g->n_inputs + 1, sizeof *s->in_axis);
	s->out_axis = calloc((size_t)g->n_outputs + 1, sizeof *s->out_axis);
	if (!s->in_axis || !s->out_axis) {
		dl_session_step_end(s);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	s->in_axis[tok] = 1;
	s->tok = tok;
	s->rows = rows;
	s->max_len = max_len;
	return 0;
}

/* The first stepped call's shapes are known: follow the tokens through
 * the model and lay out its state. */
static int step_setup(struct dl_session *s, struct dl_error *err)
{
	struct dl_graph *g = s->g;
	int rc = dl_graph_step_analyse(g, s->in_axis, s->max_len, s->out_axis, err);
	if (rc)
		return rc;
	size_t f = dl_graph_step_floats(g);
	if (f > 0 && (double)f * (double)s->rows * sizeof(float) > (double)dl_max_memory())
		return dl_error_set(err, DL_EINPUT,
				    "%s: the decoding state of %lld sequences of %lld positions "
				    "needs %.0f MiB, more than --max-memory allows", g->file,
				    (long long)s->rows, (long long)s->max_len,
				    (double)f * (double)s->rows * sizeof(float) / 1048576.0);
	s->state = f ? calloc(f * (size_t)s->rows, sizeof(float)) : NULL;
	if (f && !s->state) {
		dl_graph_step_clear(g);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	dl_graph_step_bind(g, s->state, s->rows);
	/* the values the token entries read of the others, kept */
	s->konst_off = malloc(sizeof *s->konst_off * (size_t)(g->n_values + 1));
	if (!s->konst_off) {
		dl_graph_step_clear(g);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	s->konst_floats = dl_graph_step_konst(g, s->konst_off);
	if (s->konst_floats &&
	    !(s->konst = calloc(s->konst_floats * (size_t)s->rows, sizeof(float)))) {
		dl_graph_step_clear(g);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	s->stepping = 1;
	return 0;
}

int dl_session_step(struct dl_session *s, const struct dl_shape *shape,
		    float *const *in, int64_t row0, const int64_t *pos,
		    struct dl_error *err)
{
	struct dl_graph *g = s->g;
	if (s->tok < 0)
		return dl_error_set(err, DL_EINPUT, "%s: stepping has not begun", g->file);
	int64_t N = shape[s->tok].d[0], T = shape[s->tok].ndim > 1 ? shape[s->tok].d[1] : 0;
	if (row0 < 0 || N < 1 || row0 + N > s->rows)
		return dl_error_set(err, DL_EINPUT, "%s: sequences %lld to %lld of %lld",
				    g->file, (long long)row0, (long long)(row0 + N - 1),
				    (long long)s->rows);
	for (int64_t i = 0; i < N; i++)
		if (pos[i] < 0 || pos[i] + T > s->max_len)
			return dl_error_set(err, DL_EINPUT,
					    "%s: sequence %lld would reach %lld positions, more "
					    "than the %lld it was begun with", g->file,
					    (long long)(row0 + i), (long long)(pos[i] + T),
					    (long long)s->max_len);
	int rc = dl_session_prepare(s, shape, 0, err);
	if (rc == 0 && !s->stepping) {
		rc = step_setup(s, err);
		/* the ops' scratch grows with their state (score rows over
		 * the caches): infer and plan again */
		g->shapes_ready = 0;
		if (rc == 0)
			rc = dl_session_prepare(s, shape, 0, err);
	}
	if (rc)
		return rc;
	struct dl_step_call st = {.row0 = row0, .pos = pos, .max_len = s->max_len,
				  .konst_off = s->konst_floats ? s->konst_off : NULL,
				  .konst = s->konst, .konst_floats = s->konst_floats,
				  .warm = 1};
	for (int64_t i = 0; i < N; i++)
		st.warm &= pos[i] > 0;
	return forward(s, in, &st, err);
}

void dl_session_step_copy(struct dl_session *s, int64_t dst, int64_t src)
{
	if (s->stepping)
		dl_graph_step_copy(s->g, dst, src);
}
