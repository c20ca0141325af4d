/* mixture_of_experts: sparse top-k gating per token (Shazeer et al.). Each
 * expert is an inner graph (a copy of the `expert:` entries, built by the
 * loader); only the chosen experts run, on the tokens routed to them, in
 * memory this node's plan holds for the worst case (ops/subgraph.h). */
#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/graph.h"
#include "engine/gemm.h"
#include "engine/op.h"
#include "ops/subgraph.h"

enum { HP_E, HP_K, HP_EXPERT, N_HP };

static const struct dl_hp_desc moe_hp[] = {
	{"num_experts", DL_HP_INT, NULL, NULL, DL_HP_REQUIRED | DL_HP_POSITIVE},
	{"k", DL_HP_INT, "2", NULL, DL_HP_POSITIVE},
	/* def: the copies' scope prefix; choices: how many copies */
	{"expert", DL_HP_ENTRIES, "experts", "num_experts", DL_HP_REQUIRED},
};

/* The layout of the per-call buffers, in floats (ints stored as int32 in
 * float-sized slots). "keep" lives from forward to backward. */
struct moe_buf {
	float *logits;   /* [M, E] */
	float *w;        /* [M, k] gate weights of the chosen experts */
	int *sel;        /* [M, k] chosen experts */
	int *order;      /* [M*k] (token*k + slot), grouped by expert */
	int *start;      /* [E + 1] each expert's first place in order */
	float *xg;       /* [M*k, D] inputs gathered by expert */
	/* scratch (backward) */
	float *dy;       /* [M*k, Dout] */
	float *dx;       /* [M*k, D] */
	double *gw;      /* [M*k] dL/d(gate weight) of each (token, slot) */
};

/* Scratch floats of one backward call. */
static size_t scratch_floats(int64_t M, int64_t k, int64_t D, int64_t Dout)
{
	return (size_t)(M * k * (Dout + D) + 2 * M * k + 2);
}

static size_t keep_floats(int64_t M, int64_t E, int64_t k, int64_t D)
{
	return (size_t)(M * E + 2 * M * k + M * k + E + 1 + M * k * D);
}

static void layout(struct moe_buf *b, float *keep, float *scratch, int64_t M,
		   int64_t E, int64_t k, int64_t D, int64_t Dout)
{
	b->logits = keep;
	b->w = b->logits + M * E;
	b->sel = (int *)(b->w + M * k);
	b->order = (int *)((float *)b->sel + M * k);
	b->start = (int *)((float *)b->order + M * k);
	b->xg = (float *)b->start + E + 1;
	b->dy = scratch;
	b->dx = scratch ? scratch + M * k * Dout : NULL;
	/* doubles on an 8-byte boundary: the workspace is 64-byte aligned */
	b->gw = scratch ? (double *)(void *)(((uintptr_t)(b->dx + M * k * D) + 7) & ~(uintptr_t)7)
			: NULL;
}

static struct dl_subgraphs *subs(const struct dl_node *n)
{
	return n->sub;
}

static size_t align64(size_t x)
{
	return (x + 63) / 64 * 64;
}

/* Where things live, in bytes from the workspace's (ws) or the saved
 * state's (sv) start. Workspace: the kept buffers (inference only), the
 * backward's scratch, the experts' inference activations (planned for all
 * M tokens, shared by the experts one after another), the experts' own
 * workspace. Saved state (training): the kept buffers, then the experts
 * that ran, each on its share of the tokens, packed one after another. */
struct moe_mem {
	size_t keep, scratch, arena, inner_ws;   /* ws offsets */
	size_t experts;                          /* sv offset */
};

static struct moe_mem mem(const struct dl_node *n, int64_t M, int64_t E, int64_t k,
			  int64_t D, int64_t Dout)
{
	struct moe_mem m;
	m.keep = 0;
	m.scratch = align64(keep_floats(M, E, k, D) * sizeof(float));
	m.arena = m.scratch + align64(scratch_floats(M, k, D, Dout) * sizeof(float));
	m.inner_ws = m.arena + dl_sub_planned(n)->arena;
	m.experts = m.scratch;
	return m;
}

static int moe_infer(struct dl_node *n, const struct dl_shape *in,
		     struct dl_shape *out, struct dl_error *err)
{
	struct dl_subgraphs *s = subs(n);
	int64_t E = n->hp[HP_E].i, k = n->hp[HP_K].i;
	if (!s || s->n != E)
		return dl_node_error(err, n, HP_EXPERT, "internal: experts not built");
	if (k > E)
		return dl_node_error(err, n, HP_K, "k %lld is more than num_experts %lld",
				     (long long)k, (long long)E);
	if (in[0].ndim < 2)
		return dl_node_error(err, n, -1, "expects [N, ..., D] token vectors");
	int64_t D = in[0].d[in[0].ndim - 1];
	int64_t M = dl_shape_prod(&in[0], 0, in[0].ndim - 1);
	int64_t Dout = -1, macs = 0;
	/* An expert runs on 1 to M tokens (each token picks k different
	 * experts, M k rows in all). Its sizes are affine in the rows, so the
	 * plan is made at M rows and the sizes at 1 and M bound every call. */
	size_t raw1 = 0, rawM = 0, ws1 = 0;
	int terms = 0;
	for (int pass = 0; pass < 2; pass++)
		for (int e = 0; e < E; e++) {
			struct dl_graph *g = s->g[e];
			struct dl_shape xs = {2, {pass ? M : 1, D}};
			struct dl_error sub = {0};
			if (dl_sub_infer(g, &xs, &sub) != 0)
				return dl_node_error(err, n, HP_EXPERT, "expert %d: %s", e, sub.msg);
			size_t raw = dl_sub_packed_bytes(g, 0, &terms);
			if (!pass) {
				raw1 = raw > raw1 ? raw : raw1;
				for (int j = 0; j < g->n_nodes; j++)
					ws1 = g->nodes[j].ws_bytes > ws1 ? g->nodes[j].ws_bytes : ws1;
				continue;
			}
			rawM = raw > rawM ? raw : rawM;
			const struct dl_shape *ys = &g->values[g->outputs[0]].shape;
			if (ys->ndim != 2 || g->n_outputs != 1)
				return dl_node_error(err, n, HP_EXPERT,
						     "an expert must map each token vector to one vector");
			if (Dout >= 0 && ys->d[1] != Dout)
				return dl_node_error(err, n, HP_EXPERT, "experts disagree on the output size");
			Dout = ys->d[1];
			for (int j = 0; j < g->n_nodes; j++) {
				macs += g->nodes[j].macs;
				if (!g->nodes[j].op->backward)
					return dl_node_error(err, n, HP_EXPERT,
							     "experts are made of ops that can be trained; %s cannot",
							     g->nodes[j].op->name);
			}
		}
	/* parameters: the gate, then every expert's, named experts.I.J.NAME */
	struct dl_shape gs = {2, {E, D}};
	int rc = dl_node_param(n, "gate.weight", &gs, DL_INIT_ZEROS, 0, err);
	if (rc < 0)
		return rc;
	struct dl_sub_sizes sz;
	if ((rc = dl_sub_plan(n, s, &sz, err)) != 0)
		return rc;
	*out = in[0];
	out->d[out->ndim - 1] = Dout;
	/* the experts that run, packed: each buffer's bytes are a + b rows
	 * (give or take a few: bit masks), rounded up to 64 */
	size_t packed;
	int64_t running = E < k * M ? E : k * M;
	if (M <= 1) {
		packed = (size_t)running * (raw1 + 128 * (size_t)terms);
	} else {
		size_t b = rawM > raw1 ? (rawM - raw1 + (size_t)M - 2) / (size_t)(M - 1) : 0;
		size_t a = raw1 > b ? raw1 - b : 0;
		packed = (size_t)running * (a + 128 * (size_t)terms) + b * (size_t)(k * M);
	}
	struct moe_mem m = mem(n, M, E, k, D, Dout);
	n->saved_bytes = m.experts + packed;
	n->ws_bytes = m.inner_ws + (align64(ws1) > sz.ws ? align64(ws1) : sz.ws);
	n->macs = M * D * E + macs * k / E;
	return 0;
}

/* Runs expert e on its cnt gathered tokens, placed at *used bytes into
 * the saved state (training; *used grows) or in the workspace; returns
 * its output rows. */
static const float *run_expert(struct dl_node *n, int e, int64_t cnt, int64_t D,
			       float *xg, const struct moe_mem *m, size_t *used,
			       struct dl_ctx *ctx)
{
	struct dl_graph *g = subs(n)->g[e];
	struct dl_shape xs = {2, {cnt, D}};
	struct dl_error err = {0};
	/* cannot fail: the expert was inferred on 1 and M rows, and a token
	 * count changes only the batch */
	if (dl_sub_infer(g, &xs, &err) != 0)
		return NULL;
	char *ws = ctx->ws;
	/* the bound of moe_infer holds for affine sizes */
	assert(!ctx->saved || m->experts + *used + dl_sub_packed_bytes(g, 1, NULL) <=
				      n->saved_bytes);
	if (ctx->saved)
		*used += dl_sub_bind_packed(g, (char *)ctx->saved + m->experts + *used,
					    ws + m->inner_ws);
	else
		dl_sub_bind(n, subs(n), e, 0, ws + m->arena, ws + m->inner_ws);
	struct dl_ctx sub = *ctx;
	float *in[1] = {xg};
	dl_graph_forward(g, in, &sub);
	return g->values[g->outputs[0]].data;
}

static void moe_forward(struct dl_node *n, const struct dl_tensor *in,
			struct dl_tensor *out, struct dl_ctx *ctx)
{
	int64_t E = n->hp[HP_E].i, k = n->hp[HP_K].i;
	int64_t D = in[0].shape.d[in[0].shape.ndim - 1];
	int64_t M = dl_shape_prod(&in[0].shape, 0, in[0].shape.ndim - 1);
	int64_t Dout = out->shape.d[out->shape.ndim - 1];
	memset(out->data, 0, (size_t)(M * Dout) * sizeof(float));
	if (M == 0)
		return;
	struct moe_mem m = mem(n, M, E, k, D, Dout);
	struct moe_buf b;
	layout(&b, ctx->saved ? ctx->saved : ctx->ws, NULL, M, E, k, D, Dout);
	const float *x = in[0].data, *gate = n->params[0].data;
	dl_sub_link(n, subs(n));
	dl_sgemm(0, 1, (int)M, (int)E, (int)D, 1.0f, x, (int)D, gate, (int)D, 0.0f,
		 b.logits, (int)E);
	/* top k per token (the lower index first on ties), softmax among them */
	for (int e = 0; e <= E; e++)
		b.start[e] = 0;
	for (int64_t t = 0; t < M; t++) {
		const float *l = b.logits + t * E;
		int *sel = b.sel + t * k;
		for (int s = 0; s < k; s++) {
			int best = -1;
			for (int e = 0; e < E; e++) {
				int taken = 0;
				for (int q = 0; q < s; q++)
					taken |= sel[q] == e;
				if (!taken && (best < 0 || l[e] > l[best]))
					best = e;
			}
			sel[s] = best;
			b.start[best + 1]++;
		}
		double mx = l[sel[0]], sum = 0;
		for (int s = 0; s < k; s++)
			sum += exp((double)l[sel[s]] - mx);
		for (int s = 0; s < k; s++)
			b.w[t * k + s] = (float)(exp((double)l[sel[s]] - mx) / sum);
	}
	for (int e = 0; e < E; e++)
		b.start[e + 1] += b.start[e];
	/* group (token, slot) by expert, in token order, and gather inputs:
	 * start[e + 1] serves as expert e's cursor, then is shifted back */
	for (int64_t t = 0; t < M; t++)
		for (int s = 0; s < k; s++) {
			int e = b.sel[t * k + s], at = b.start[e]++;
			b.order[at] = (int)(t * k + s);
			memcpy(b.xg + (int64_t)at * D, x + t * D, (size_t)D * sizeof(float));
		}
	for (int64_t e = E; e > 0; e--)
		b.start[e] = b.start[e - 1];
	b.start[0] = 0;
	size_t used = 0;
	for (int e = 0; e < E; e++) {
		int64_t cnt = b.start[e + 1] - b.start[e];
		if (cnt == 0)
			continue;
		const float *y = run_expert(n, e, cnt, D, b.xg + (int64_t)b.start[e] * D,
					    &m, &used, ctx);
		if (!y)
			continue;
		for (int64_t r = 0; r < cnt; r++) {
			int ts = b.order[b.start[e] + r];
			float w = b.w[ts];
			float *o = out->data + (int64_t)(ts / k) * Dout;
			for (int64_t c = 0; c < Dout; c++)
				o[c] += w * y[r * Dout + c];
		}
	}
}

static void moe_backward(struct dl_node *n, const struct dl_tensor *in,
			 const struct dl_tensor *out, const float *dout,
			 float *const *din, struct dl_ctx *ctx)
{
	int64_t E = n->hp[HP_E].i, k = n->hp[HP_K].i;
	int64_t D = in[0].shape.d[in[0].shape.ndim - 1];
	int64_t M = dl_shape_prod(&in[0].shape, 0, in[0].shape.ndim - 1);
	int64_t Dout = out->shape.d[out->shape.ndim - 1];
	if (M == 0)
		return;
	struct moe_mem m = mem(n, M, E, k, D, Dout);
	struct moe_buf b;
	layout(&b, ctx->saved, (float *)(void *)((char *)ctx->ws + m.scratch), M, E, k, D, Dout);
	const float *x = in[0].data, *gate = n->params[0].data;
	float *dgate = n->params[0].grad;
	double *gw = b.gw;  /* dout[t] . y_e[row] for each (token, slot) */
	size_t used = 0;
	dl_sub_link(n, subs(n));
	for (int e = 0; e < E; e++) {
		int64_t cnt = b.start[e + 1] - b.start[e];
		if (cnt == 0)
			continue;
		/* the expert where its forward left it, shapes and all */
		struct dl_graph *g = subs(n)->g[e];
		used += dl_sub_bind_packed(g, (char *)ctx->saved + m.experts + used,
					   (char *)ctx->ws + m.inner_ws);
		const float *y = g->values[g->outputs[0]].data;
		for (int64_t r = 0; r < cnt; r++) {
			int ts = b.order[b.start[e] + r];
			const float *go = dout + (int64_t)(ts / k) * Dout;
			double dot = 0;
			for (int64_t c = 0; c < Dout; c++) {
				b.dy[r * Dout + c] = b.w[ts] * go[c];
				dot += (double)go[c] * y[r * Dout + c];
			}
			gw[ts] = dot;
		}
		/* the expert's own backward: parameters, and its inputs' gradient */
		memset(b.dx, 0, (size_t)(cnt * D) * sizeof(float));
		struct dl_ctx sub = *ctx;
		const float *dys[1] = {b.dy};
		float *dxs[1] = {b.dx};
		dl_graph_backward(g, dys, dxs, &sub);
		if (din[0])
			for (int64_t r = 0; r < cnt; r++) {
				int ts = b.order[b.start[e] + r];
				float *dx = din[0] + (int64_t)(ts / k) * D;
				for (int64_t c = 0; c < D; c++)
					dx[c] += b.dx[r * D + c];
			}
	}
	/* through the softmax over the chosen logits, into the gate */
	for (int64_t t = 0; t < M; t++) {
		double mean = 0;
		for (int s = 0; s < k; s++)
			mean += b.w[t * k + s] * gw[t * k + s];
		for (int s = 0; s < k; s++) {
			int e = b.sel[t * k + s];
			float dl = (float)(b.w[t * k + s] * (gw[t * k + s] - mean));
			if (dgate)
				for (int64_t c = 0; c < D; c++)
					dgate[e * D + c] += dl * x[t * D + c];
			if (din[0])
				for (int64_t c = 0; c < D; c++)
					din[0][t * D + c] += dl * gate[e * D + c];
		}
	}
}

/* y = sum over the k largest gate logits (x gate.weight^T) of
 * softmax(those logits)_i expert_i(x), per token vector */
static const struct dl_op_desc moe_op = {
	.name = "mixture_of_experts",
	.doc = "y = sum_{i in topk(x W_g^T)} softmax_k(x W_g^T)_i expert_i(x), per token",
	.min_in = 1, .max_in = 1,
	.hp = moe_hp, .n_hp = N_HP,
	.infer = moe_infer, .forward = moe_forward, .backward = moe_backward,
	.flags = DL_OP_COMPLEX | DL_OP_BWD_NO_OUTPUT,
	.params = "gate.weight [num_experts, D]; experts.I.J.<param> of expert I's entry J",
};

const struct dl_op_desc *const dl_ops_moe[] = {&moe_op, NULL};
