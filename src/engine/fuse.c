/* The fusion pass of inference plans, and the epilogue kernels.
 *
 * The pass (dl_graph_fuse, run by dl_graph_plan for an inference plan of a
 * graph whose weights are fixed: dlrun infer, dlrun bench without --train)
 * walks the nodes in order. A chain starts at a conv1d or conv2d (not
 * transposed) or a linear node and takes in the nodes that directly follow
 * it, while
 *   - the chain's current output has exactly one reader, the next node, and
 *     is not a model output;
 *   - the next node is, in this order, any of:
 *       batch_norm1d / batch_norm2d with running statistics, right after a
 *         convolution: folded (scale and shift per output channel, made
 *         once from the running statistics, weight and bias);
 *       relu, relu6, silu or gelu: the first activation;
 *       add of two inputs of the same shape whose other input was made
 *         before the chain's head (a model input, or an earlier node's
 *         output: it is in memory when the head runs);
 *       relu, relu6, silu or gelu after the add: the second activation;
 *       dropout, dropout2d, drop_path or identity, anywhere after the
 *       head: the identity at inference, skipped.
 * A chain of the head alone is not fused. The head then writes the chain's
 * last output, applying the epilogue to each tile of rows while it is in
 * cache (a linear head: to its output rows after the product); the other
 * nodes of the chain are skipped, their outputs share the last one's
 * buffer (aliases), which the layout places from the head's step on. Each
 * kernel of the epilogue computes what the unfused op does, in the same
 * order, so fused and unfused outputs agree (tests/fuse.sh).
 *
 * An identity node outside a chain (a dropout after attention) is skipped
 * too when its input is an earlier node's output with no other reader and
 * no alias: that node writes the identity's output buffer directly (each
 * was a copy of [T, d] floats per layer of a decoder). Composite ops' inner
 * graphs run the same pass (ops/subgraph.c plans both layouts, dl_ctx.fuse
 * chooses). Training plans are never fused: backward needs every
 * activation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/fuse.h"
#include "engine/graph.h"
#include "engine/op.h"
#include "engine/vmath.h"   /* dl_erff, DL_CLONES */

#define GELU_SQRT1_2 0.70710678118654752440f    /* as src/ops/activation.c */
#define GELU_BETA 0.79788456080286535588f
#define GELU_KAPPA 0.044715f

static const struct dl_hp_value *hp_of(const struct dl_node *n, const char *name)
{
	for (int k = 0; k < n->op->n_hp; k++)
		if (strcmp(n->op->hp[k].name, name) == 0)
			return &n->hp[k];
	return NULL;
}

/* The activation a node computes as an epilogue, or DL_ACT_NONE (its
 * descriptor says: .fuse, .fuse_act). */
static int act_of(const struct dl_node *n)
{
	return n->op->fuse == DL_FUSE_ACT && n->op->fuse_act ? n->op->fuse_act(n) : DL_ACT_NONE;
}

/* The identity at inference (dropout's kinds in eval mode). */
static int is_identity(const struct dl_node *n)
{
	return n->op->fuse == DL_FUSE_IDENTITY;
}

/* n (an identity outside a chain) skipped, its input written straight
 * into its output's buffer, when that input is an earlier node's output
 * read only by n and not fused already. */
static void skip_identity(struct dl_graph *g, struct dl_node *n, const int *readers)
{
	if (n->n_in != 1 || (n->op->n_outputs && n->op->n_outputs(n) > 1))
		return;
	int v = n->in[0];
	struct dl_value *x = &g->values[v];
	if (v < g->n_inputs || readers[v] != 1 || x->pinned || x->alias ||
	    x->born || g->values[n->out].born)
		return;
	x->alias = n->out + 1;
	g->values[n->out].born = x->producer + 1;
	n->fused = 1;
}

/* 1: heads a chain with a per-row epilogue; 2: per channel; 0: not */
static int head_of(const struct dl_node *n)
{
	return n->op->fuse == DL_FUSE_HEAD_ROWS ? 1 : n->op->fuse == DL_FUSE_HEAD_CHANNELS ? 2 : 0;
}

void dl_graph_unfuse(struct dl_graph *g)
{
	for (int i = 0; i < g->n_nodes; i++) {
		struct dl_node *n = &g->nodes[i];
		if (n->epi) {
			free(n->epi->scale);
			free(n->epi);
			n->epi = NULL;
		}
		n->fused = 0;
	}
	for (int v = 0; v < g->n_values; v++)
		g->values[v].alias = g->values[v].born = 0;
}

int dl_graph_fuse(struct dl_graph *g)
{
	dl_graph_unfuse(g);
	int *readers = calloc((size_t)g->n_values + 1, sizeof *readers);
	if (!readers)
		return -1;
	for (int i = 0; i < g->n_nodes; i++)
		for (int k = 0; k < g->nodes[i].n_in; k++)
			readers[g->nodes[i].in[k]]++;
	for (int i = 0; i < g->n_nodes; i++) {
		struct dl_node *h = &g->nodes[i];
		int kind = head_of(h);
		if (is_identity(h))
			skip_identity(g, h, readers);
		if (!kind || (h->op->n_outputs && h->op->n_outputs(h) > 1))
			continue;
		struct dl_epilogue e = {.bn = -1, .res = -1, .last = i};
		int v = h->out, j = i + 1;
		for (; j < g->n_nodes; j++) {
			struct dl_node *n = &g->nodes[j];
			const struct dl_value *x = &g->values[v];
			if (readers[v] != 1 || x->pinned || (n->op->n_outputs && n->op->n_outputs(n) > 1))
				break;
			int a = act_of(n);
			if (kind == 2 && j == i + 1 && n->op->fuse == DL_FUSE_BATCH_NORM &&
			    n->in[0] == v && dl_node_find_param(n, "running_mean") >= 0) {
				e.bn = j;
			} else if (a && n->n_in == 1 && n->in[0] == v && e.res < 0 && !e.act1) {
				e.act1 = a;
			} else if (a && n->n_in == 1 && n->in[0] == v && e.res >= 0 && !e.act2) {
				e.act2 = a;
			} else if (n->op->fuse == DL_FUSE_ADD && n->n_in == 2 && e.res < 0 &&
				   (n->in[0] == v) != (n->in[1] == v)) {
				int r = n->in[0] == v ? n->in[1] : n->in[0];
				const struct dl_value *rv = &g->values[r];
				if (rv->producer >= i || !dl_shape_equal(&rv->shape, &x->shape))
					break;
				e.res = r;
			} else if (is_identity(n) && n->n_in == 1 && n->in[0] == v) {
				/* nothing to do */
			} else {
				break;
			}
			v = n->out;
			e.last = j;
		}
		if (e.last == i)
			continue;
		struct dl_epilogue *p = malloc(sizeof *p);
		if (!p) {
			free(readers);
			dl_graph_unfuse(g);
			return -1;
		}
		*p = e;
		h->epi = p;
		/* the folded batch norm's scale and shift: room now, where out
		 * of memory is an error, values at the first call */
		if (p->bn >= 0) {
			const struct dl_node *bn = &g->nodes[p->bn];
			int64_t C = bn->params[dl_node_find_param(bn, "running_mean")].shape.d[0];
			p->scale = malloc((size_t)(2 * C) * sizeof(float));
			if (!p->scale) {
				free(readers);
				dl_graph_unfuse(g);
				return -1;
			}
			p->shift = p->scale + C;
		}
		/* the last output is written from the head's step on; the others
		 * share its buffer */
		int last = g->nodes[e.last].out;
		g->values[last].born = i + 1;
		g->values[h->out].alias = last + 1;
		for (int k = i + 1; k < e.last; k++) {
			g->nodes[k].fused = 1;
			g->values[g->nodes[k].out].alias = last + 1;
		}
		g->nodes[e.last].fused = 1;
		i = e.last;
	}
	free(readers);
	return 0;
}

void dl_epilogue_prepare(struct dl_graph *g, struct dl_node *h)
{
	struct dl_epilogue *e = h->epi;
	int b = dl_node_find_param(h, "bias");
	e->bias = b >= 0 ? h->params[b].data : NULL;
	if (e->bn >= 0) {
		/* scale and shift have their room from dl_graph_fuse */
		const struct dl_node *n = &g->nodes[e->bn];
		int64_t C = n->params[dl_node_find_param(n, "running_mean")].shape.d[0];
		int w = dl_node_find_param(n, "weight"), bb = dl_node_find_param(n, "bias");
		const float *rm = n->params[dl_node_find_param(n, "running_mean")].data;
		const float *rv = n->params[dl_node_find_param(n, "running_var")].data;
		const struct dl_hp_value *eps = hp_of(n, "eps");
		/* as batch_norm's eval forward: bn_running, bn_forward */
		for (int64_t c = 0; c < C; c++) {
			float rstd = (float)(1.0 / sqrt((double)rv[c] + (eps ? eps->f : 1e-5)));
			float s = rstd * (w >= 0 ? n->params[w].data[c] : 1.0f);
			e->scale[c] = s;
			e->shift[c] = (bb >= 0 ? n->params[bb].data[c] : 0.0f) - rm[c] * s;
		}
	}
	e->ready = 1;
}

static inline __attribute__((always_inline)) float act(int a, float v)
{
	switch (a) {
	case DL_ACT_RELU:
		return v > 0.0f ? v : 0.0f;
	case DL_ACT_RELU6: {
		float r = v > 0.0f ? v : 0.0f;
		return r < 6.0f ? r : 6.0f;
	}
	case DL_ACT_SILU:
		return v / (1.0f + dl_expf(-v));  /* as silu's */
	case DL_ACT_GELU:
		return 0.5f * v * (1.0f + dl_erff(v * GELU_SQRT1_2));  /* as gelu's */
	case DL_ACT_GELU_TANH: {
		float inner = GELU_BETA * (v + GELU_KAPPA * v * v * v);
		return 0.5f * v * (1.0f + tanhf(inner));
	}
	default:
		return v;
	}
}

/* one activation over a row, its loop vectorised per kind */
static inline __attribute__((always_inline)) void act_row(int a, float *y, int64_t n)
{
	switch (a) {
	case DL_ACT_RELU:
		#pragma omp simd
		for (int64_t k = 0; k < n; k++)
			y[k] = act(DL_ACT_RELU, y[k]);
		break;
	case DL_ACT_RELU6:
		#pragma omp simd
		for (int64_t k = 0; k < n; k++)
			y[k] = act(DL_ACT_RELU6, y[k]);
		break;
	case DL_ACT_SILU:
		#pragma omp simd
		for (int64_t k = 0; k < n; k++)
			y[k] = act(DL_ACT_SILU, y[k]);
		break;
	case DL_ACT_GELU:
		#pragma omp simd
		for (int64_t k = 0; k < n; k++)
			y[k] = act(DL_ACT_GELU, y[k]);
		break;
	case DL_ACT_GELU_TANH:
		#pragma omp simd
		for (int64_t k = 0; k < n; k++)
			y[k] = act(DL_ACT_GELU_TANH, y[k]);
		break;
	default:
		break;
	}
}

DL_CLONES void dl_epilogue_row(const struct dl_epilogue *e, float *y, const float *r,
				 int64_t c, int64_t n)
{
	float b = e->bias ? e->bias[c] : 0.0f;
	if (e->scale) {
		/* the convolution's bias, then batch norm's y * scale + shift,
		 * each rounded as the unfused ops do */
		float s = e->scale[c], t = e->shift[c];
		#pragma omp simd
		for (int64_t k = 0; k < n; k++)
			y[k] = (y[k] + b) * s + t;
	} else if (e->bias) {
		#pragma omp simd
		for (int64_t k = 0; k < n; k++)
			y[k] += b;
	}
	act_row(e->act1, y, n);
	if (r) {
		#pragma omp simd
		for (int64_t k = 0; k < n; k++)
			y[k] += r[k];
	}
	act_row(e->act2, y, n);
}

DL_CLONES void dl_epilogue_cols(const struct dl_epilogue *e, float *y, const float *r,
				  int64_t rows, int64_t C)
{
	#pragma omp parallel for if (rows * C > 32768)
	for (int64_t m = 0; m < rows; m++) {
		float *o = y + m * C;
		if (e->bias) {
			const float *b = e->bias;
			#pragma omp simd
			for (int64_t j = 0; j < C; j++)
				o[j] += b[j];
		}
		act_row(e->act1, o, C);
		if (r) {
			const float *rr = r + m * C;
			#pragma omp simd
			for (int64_t j = 0; j < C; j++)
				o[j] += rr[j];
		}
		act_row(e->act2, o, C);
	}
}

void dl_epilogue_lanes_prepare(const struct dl_epilogue *e, float *p, int64_t c0, int L)
{
	/* lanes beyond L repeat the last channel's: their values are
	 * dropped */
	for (int l = 0; l < DL_EPI_LANES; l++) {
		int64_t c = c0 + (l < L ? l : L - 1);
		p[l] = e->bias ? e->bias[c] : 0.0f;
		p[DL_EPI_LANES + l] = e->scale ? e->scale[c] : 1.0f;
		p[2 * DL_EPI_LANES + l] = e->scale ? e->shift[c] : 0.0f;
	}
}

DL_CLONES void dl_epilogue_lanes(const struct dl_epilogue *e, const float *p, float *y,
				 int64_t n)
{
	const float *b = p, *s = p + DL_EPI_LANES, *t = p + 2 * DL_EPI_LANES;
	if (e->scale) {
		for (int64_t k = 0; k < n; k++) {
			float *v = y + k * DL_EPI_LANES;
			#pragma omp simd
			for (int l = 0; l < DL_EPI_LANES; l++)
				v[l] = (v[l] + b[l]) * s[l] + t[l];
		}
	} else if (e->bias) {
		for (int64_t k = 0; k < n; k++) {
			float *v = y + k * DL_EPI_LANES;
			#pragma omp simd
			for (int l = 0; l < DL_EPI_LANES; l++)
				v[l] += b[l];
		}
	}
	act_row(e->act1, y, n * DL_EPI_LANES);
	act_row(e->act2, y, n * DL_EPI_LANES);
}
