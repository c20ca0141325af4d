/* mixture_of_experts: sparse top-k gating per token (Shazeer et al.). Each
 * expert is an inner graph (a copy of the `expert:` entries, built by the
 * loader); only the chosen experts run, on the tokens routed to them, in
 * memory this node's plan holds for the worst case (ops/subgraph.h).
 * Training may add the paper's gate noise and its load-balancing loss,
 * reported through ctx->aux_loss and differentiated in backward. */
#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/graph.h"
#include "engine/gemm.h"
#include "engine/op.h"
#include "engine/stepper.h"
#include "ops/subgraph.h"

enum { HP_E, HP_K, HP_EXPERT, HP_NOISY, HP_BALANCE, N_HP };

static const struct dl_hp_desc moe_hp[] = {
	{"num_experts", DL_HP_INT, NULL, NULL, DL_HP_REQUIRED | DL_HP_POSITIVE},
	{"k", DL_HP_INT, "2", NULL, DL_HP_POSITIVE},
	/* def: the copies' scope prefix; choices: how many copies */
	{"expert", DL_HP_ENTRIES, "experts", "num_experts", DL_HP_REQUIRED},
	{"noisy_gating", DL_HP_BOOL, "false", NULL, 0},
	{"balance_loss", DL_HP_FLOAT, "0", NULL, DL_HP_NONNEG},
};

/* The noise's scale is at least this: softplus underflows to 0 far below
 * -700, where the load estimator would divide by it. */
#define MIN_SIGMA 1e-30

/* The layout of the per-call buffers, in floats (ints stored as int32 in
 * float-sized slots). "keep" lives from forward to backward. */
struct moe_buf {
	float *logits;   /* [M, E] the logits that choose: noisy in training
	                  * with noisy_gating, else clean */
	float *w;        /* [M, k] gate weights of the chosen experts */
	int *sel;        /* [M, k] chosen experts */
	int *order;      /* [M*k] (token*k + slot), grouped by expert */
	int *start;      /* [E + 1] each expert's first place in order */
	float *clean;    /* [M, E] x W_g^T (noisy_gating only) */
	float *noise;    /* [M, E] the standard normal draws (noisy_gating) */
	float *raw;      /* [M, E] x W_noise^T (noisy_gating only) */
	float *xg;       /* [M*k, D] inputs gathered by expert */
	/* scratch (backward) */
	float *dy;       /* [M*k, Dout] */
	float *dx;       /* [M*k, D] */
	float *dclean;   /* [M, E] dL/d(x W_g^T) */
	float *draw;     /* [M, E] dL/d(noise scale), then dL/d(x W_noise^T) */
	double *gw;      /* [M*k] dL/d(gate weight) of each (token, slot) */
	double *dimp;    /* [E] d(balance loss)/d importance */
	double *dload;   /* [E] d(balance loss)/d load */
};

/* Scratch floats of one backward call. */
static size_t scratch_floats(int64_t M, int64_t E, int64_t k, int64_t D, int64_t Dout)
{
	return (size_t)(M * k * (Dout + D) + 2 * M * E + 2 * (M * k + 2 * E) + 2);
}

static size_t keep_floats(int64_t M, int64_t E, int64_t k, int64_t D, int noisy)
{
	return (size_t)(M * E + 2 * M * k + M * k + E + 1 + (noisy ? 3 * M * E : 0) + M * k * D);
}

static void layout(struct moe_buf *b, float *keep, float *scratch, int64_t M,
		   int64_t E, int64_t k, int64_t D, int64_t Dout, int noisy)
{
	b->logits = keep;
	b->w = b->logits + M * E;
	b->sel = (int *)(b->w + M * k);
	b->order = (int *)((float *)b->sel + M * k);
	b->start = (int *)((float *)b->order + M * k);
	float *at = (float *)b->start + E + 1;
	b->clean = b->noise = b->raw = NULL;
	if (noisy) {
		b->clean = at;
		b->noise = at + M * E;
		b->raw = at + 2 * M * E;
		at += 3 * M * E;
	}
	b->xg = at;
	b->dy = scratch;
	b->dx = scratch ? scratch + M * k * Dout : NULL;
	b->dclean = scratch ? b->dx + M * k * D : NULL;
	b->draw = scratch ? b->dclean + M * E : NULL;
	/* doubles on an 8-byte boundary: the workspace is 64-byte aligned */
	b->gw = scratch ? (double *)(void *)(((uintptr_t)(b->draw + M * E) + 7) & ~(uintptr_t)7)
			: NULL;
	b->dimp = scratch ? b->gw + M * k : NULL;
	b->dload = scratch ? b->dimp + E : NULL;
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
	m.scratch = align64(keep_floats(M, E, k, D, (int)n->hp[HP_NOISY].i) * sizeof(float));
	m.arena = m.scratch + align64(scratch_floats(M, E, k, D, Dout) * sizeof(float));
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
	/* W_noise starts at zero too, as the paper's: a noise of scale
	 * softplus(0) = log 2 */
	if (n->hp[HP_NOISY].i && (rc = dl_node_param(n, "noise.weight", &gs, DL_INIT_ZEROS, 0,
						     err)) < 0)
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
	n->macs = M * D * E * (n->hp[HP_NOISY].i ? 2 : 1) + macs * k / E;
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
		dl_sub_bind(n, subs(n), e, 0, dl_ctx_fuses(ctx), ws + m->arena, ws + m->inner_ws);
	struct dl_ctx sub = *ctx;
	float *in[1] = {xg};
	dl_graph_forward(g, in, &sub);
	return g->values[g->outputs[0]].data;
}

static double softplus(double v)
{
	return v > 20 ? v : log1p(exp(v));  /* PyTorch's threshold 20 */
}

/* The largest of l[0..E) not among taken[0..nt) (the lower index on ties). */
static int next_best(const float *l, int64_t E, const int *taken, int nt)
{
	int best = -1;
	for (int e = 0; e < E; e++) {
		int t = 0;
		for (int q = 0; q < nt; q++)
			t |= taken[q] == e;
		if (!t && (best < 0 || l[e] > l[best]))
			best = e;
	}
	return best;
}

/* Standard normals z[M, E] from rng: per token, pairs of uniforms u1, u2
 * give sqrt(-2 ln(1 - u1)) cos(2 pi u2) and then sin(2 pi u2) (Box-Muller;
 * an odd E drops the last sine), so each token takes 2 ceil(E/2) draws. */
static void draw_noise(float *z, int64_t M, int64_t E, struct dl_rng *rng)
{
	for (int64_t t = 0; t < M; t++)
		for (int64_t e = 0; e < E; e += 2) {
			double u1 = 1.0 - dl_rng_uniform(rng), u2 = dl_rng_uniform(rng);
			double r = sqrt(-2.0 * log(u1));
			z[t * E + e] = (float)(r * cos(2.0 * M_PI * u2));
			if (e + 1 < E)
				z[t * E + e + 1] = (float)(r * sin(2.0 * M_PI * u2));
		}
}

/* CV^2 = var / (mean^2 + 1e-10), the population variance, as the paper's
 * code (tensor2tensor's cv_squared); with grad, v[] is replaced by
 * wgt d(CV^2)/dv. */
static double cv_squared(double *v, int64_t E, double wgt, int grad)
{
	double m = 0, var = 0;
	for (int64_t e = 0; e < E; e++)
		m += v[e];
	m /= (double)E;
	for (int64_t e = 0; e < E; e++)
		var += (v[e] - m) * (v[e] - m);
	var /= (double)E;
	double den = m * m + 1e-10, c = var / den;
	for (int64_t e = 0; grad && e < E; e++)
		v[e] = wgt * (2.0 * (v[e] - m) / ((double)E * den) -
			      c * 2.0 * m / ((double)E * den));
	return c;
}

/* The load estimator's pieces for token t, expert e (the paper's
 * appendix A): P = Phi((clean_e - thr) / sigma_e), thr the noisy logit of
 * expert *j, the k-th largest noisy logit excluding e's own: the (k+1)-th
 * overall when e's noisy logit is above it, else the k-th. */
static double load_z(const struct moe_buf *b, int64_t t, int64_t e, int64_t E, int kth,
		      int k1, int *j, double *sigma)
{
	const float *l = b->logits + t * E;
	*j = l[e] > l[k1] ? k1 : kth;
	double s = softplus(b->raw[t * E + e]);
	*sigma = s > MIN_SIGMA ? s : MIN_SIGMA;
	return ((double)b->clean[t * E + e] - l[*j]) / *sigma;
}

/* The balance loss w (CV^2(importance) + CV^2(load)) of the last forward
 * (of the whole global batch in data-parallel training, sums taken over
 * the processes, so that every process computes the loss one process
 * would; its gradient is then divided by this process's share, which the
 * gradient reduction multiplies back):
 * importance[e] = sum of the tokens' gate weights of e; load[e] = the sum
 * of P(token in e's top k) when the noise makes it smooth (training with
 * noisy_gating and k < E), else the count of tokens sent to e with a
 * nonzero weight (no gradient), as tensor2tensor's _gates_to_load. With
 * grad, b->dimp and b->dload receive the loss's gradient with respect to
 * importance and load. b->dimp and b->dload are the storage either way. */
static double balance(const struct dl_node *n, const struct moe_buf *b, int64_t M,
		      int noisy_train, int grad, const struct dl_shard *sh)
{
	int64_t E = n->hp[HP_E].i, k = n->hp[HP_K].i;
	double wgt = n->hp[HP_BALANCE].f, *imp = b->dimp, *load = b->dload;
	int smooth = noisy_train && k < E;
	for (int64_t e = 0; e < E; e++)
		imp[e] = load[e] = 0;
	for (int64_t t = 0; t < M; t++)
		for (int64_t s = 0; s < k; s++) {
			imp[b->sel[t * k + s]] += b->w[t * k + s];
			if (!smooth && b->w[t * k + s] > 0)
				load[b->sel[t * k + s]] += 1;
		}
	for (int64_t t = 0; smooth && t < M; t++) {
		int kth = b->sel[t * k + k - 1];
		int k1 = next_best(b->logits + t * E, E, b->sel + t * k, (int)k);
		for (int64_t e = 0; e < E; e++) {
			int j;
			double sigma, z = load_z(b, t, e, E, kth, k1, &j, &sigma);
			load[e] += 0.5 * erfc(-z * M_SQRT1_2);
		}
	}
	if (sh && sh->allreduce) {
		sh->allreduce(sh, imp, (int)(2 * E));  /* load follows imp */
		if (sh->weight > 0)
			wgt /= sh->weight;
		else
			grad = 0;  /* no tokens here: nothing to differentiate */
	}
	double loss = n->hp[HP_BALANCE].f * (cv_squared(imp, E, wgt, grad) +
					     cv_squared(load, E, wgt, grad));
	for (int64_t e = 0; grad && !smooth && e < E; e++)
		load[e] = 0;
	return loss;
}

static void moe_forward(struct dl_node *n, const struct dl_tensor *in,
			struct dl_tensor *out, struct dl_ctx *ctx)
{
	int64_t E = n->hp[HP_E].i, k = n->hp[HP_K].i;
	int64_t D = in[0].shape.d[in[0].shape.ndim - 1];
	int64_t M = dl_shape_prod(&in[0].shape, 0, in[0].shape.ndim - 1);
	int64_t Dout = out->shape.d[out->shape.ndim - 1];
	int noisy = (int)n->hp[HP_NOISY].i, noisy_train = noisy && ctx->train;
	memset(out->data, 0, (size_t)(M * Dout) * sizeof(float));
	struct moe_mem m = mem(n, M, E, k, D, Dout);
	struct moe_buf b;
	layout(&b, ctx->saved ? ctx->saved : ctx->ws, (float *)(void *)((char *)ctx->ws + m.scratch),
	       M, E, k, D, Dout, noisy);
	/* noise drawn as one process would for the whole batch */
	const struct dl_shard *sh = ctx->shard;
	int64_t N = in[0].shape.d[0];
	int64_t per = dl_shape_prod(&in[0].shape, 1, in[0].shape.ndim - 1) * 2 * ((E + 1) / 2);
	int bal = ctx->train && n->hp[HP_BALANCE].f > 0;
	if (M == 0) {
		/* a process without samples still takes its part: the draws
		 * and the balance loss's sums */
		if (noisy_train && sh)
			dl_shard_rng_skip(sh, ctx->rng, sh->total, per);
		if (bal && sh && sh->allreduce)
			balance(n, &b, 0, noisy_train, 0, sh);
		return;
	}
	const float *x = in[0].data, *gate = n->params[0].data;
	dl_sub_link(n, subs(n));
	if (noisy_train) {
		/* H = x W_g^T + N(0, 1) softplus(x W_noise^T) */
		const float *wn = n->params[1].data;
		dl_sgemm(0, 1, (int)M, (int)E, (int)D, 1.0f, x, (int)D, gate, (int)D, 0.0f,
			 b.clean, (int)E);
		dl_sgemm(0, 1, (int)M, (int)E, (int)D, 1.0f, x, (int)D, wn, (int)D, 0.0f,
			 b.raw, (int)E);
		if (sh)
			dl_shard_rng_skip(sh, ctx->rng, sh->off, per);
		draw_noise(b.noise, M, E, ctx->rng);
		if (sh)
			dl_shard_rng_skip(sh, ctx->rng, sh->total - sh->off - N, per);
		for (int64_t i = 0; i < M * E; i++)
			b.logits[i] = b.clean[i] + b.noise[i] * (float)softplus(b.raw[i]);
	} else {
		dl_sgemm(0, 1, (int)M, (int)E, (int)D, 1.0f, x, (int)D, gate, (int)D, 0.0f,
			 b.logits, (int)E);
	}
	/* top k per token (the lower index first on ties), softmax among them */
	for (int e = 0; e <= E; e++)
		b.start[e] = 0;
	for (int64_t t = 0; t < M; t++) {
		const float *l = b.logits + t * E;
		int *sel = b.sel + t * k;
		for (int s = 0; s < k; s++) {
			sel[s] = next_best(l, E, sel, s);
			b.start[sel[s] + 1]++;
		}
		double mx = l[sel[0]], sum = 0;
		for (int s = 0; s < k; s++)
			sum += exp((double)l[sel[s]] - mx);
		for (int s = 0; s < k; s++)
			b.w[t * k + s] = (float)(exp((double)l[sel[s]] - mx) / sum);
	}
	if (bal) {
		double aux = balance(n, &b, M, noisy_train, 0, sh);
		if (ctx->aux_loss)
			*ctx->aux_loss += aux;
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
	int noisy = (int)n->hp[HP_NOISY].i, noisy_train = noisy && ctx->train;
	int bal = ctx->train && n->hp[HP_BALANCE].f > 0;
	struct moe_mem m = mem(n, M, E, k, D, Dout);
	struct moe_buf b;
	layout(&b, ctx->saved, (float *)(void *)((char *)ctx->ws + m.scratch), M, E, k, D, Dout,
	       noisy);
	if (M == 0) {
		/* the balance loss's sums, as in forward */
		if (bal && ctx->shard && ctx->shard->allreduce)
			balance(n, &b, 0, noisy_train, 1, ctx->shard);
		return;
	}
	const float *x = in[0].data;
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
	/* through the softmax over the chosen logits (the balance loss's
	 * importance adds to each chosen weight's gradient), into the logits
	 * that chose: dclean, and with noise the noise's scale (draw) */
	memset(b.dclean, 0, (size_t)(2 * M * E) * sizeof(float));
	if (bal) {
		balance(n, &b, M, noisy_train, 1, ctx->shard);
		for (int64_t t = 0; t < M; t++)
			for (int s = 0; s < k; s++)
				gw[t * k + s] += b.dimp[b.sel[t * k + s]];
	}
	for (int64_t t = 0; t < M; t++) {
		double mean = 0;
		for (int s = 0; s < k; s++)
			mean += b.w[t * k + s] * gw[t * k + s];
		for (int s = 0; s < k; s++) {
			int64_t i = t * E + b.sel[t * k + s];
			double dl = b.w[t * k + s] * (gw[t * k + s] - mean);
			b.dclean[i] += (float)dl;
			if (noisy_train)
				b.draw[i] += (float)(dl * b.noise[i]);
		}
	}
	/* the load estimator: P = Phi(z), z = (clean_e - H_j) / sigma_e, H_j =
	 * clean_j + noise_j sigma_j the threshold's noisy logit */
	for (int64_t t = 0; bal && noisy_train && k < E && t < M; t++) {
		int kth = b.sel[t * k + k - 1];
		int k1 = next_best(b.logits + t * E, E, b.sel + t * k, (int)k);
		for (int64_t e = 0; e < E; e++) {
			int j;
			double sigma, z = load_z(&b, t, e, E, kth, k1, &j, &sigma);
			double g = b.dload[e] * exp(-0.5 * z * z) / sqrt(2.0 * M_PI) / sigma;
			b.dclean[t * E + e] += (float)g;
			b.dclean[t * E + j] -= (float)g;
			b.draw[t * E + j] -= (float)(g * b.noise[t * E + j]);
			b.draw[t * E + e] -= (float)(g * z);
		}
	}
	/* softplus' = sigmoid */
	for (int64_t i = 0; noisy_train && i < M * E; i++)
		b.draw[i] *= (float)(1.0 / (1.0 + exp(-(double)b.raw[i])));
	/* logits = x W^T: dW += dlogits^T x, dx += dlogits W */
	for (int p = 0; p < (noisy_train ? 2 : 1); p++) {
		const float *dl = p ? b.draw : b.dclean, *wp = n->params[p].data;
		float *dwp = n->params[p].grad;
		if (dwp)
			dl_sgemm(1, 0, (int)E, (int)D, (int)M, 1.0f, dl, (int)E, x, (int)D, 1.0f,
				 dwp, (int)D);
		if (din[0])
			dl_sgemm(0, 0, (int)M, (int)D, (int)E, 1.0f, dl, (int)E, wp, (int)D, 1.0f,
				 din[0], (int)D);
	}
}

static int moe_has_aux(const struct dl_node *n)
{
	return n->hp[HP_BALANCE].f > 0;
}

/* y = sum over the k largest gate logits (x gate.weight^T) of
 * softmax(those logits)_i expert_i(x), per token vector. In training,
 * noisy_gating chooses by H = x W_g^T + N(0, 1) softplus(x W_noise^T)
 * (Shazeer et al. 2017, eq. 3-5), and balance_loss w adds w (CV^2(importance)
 * + CV^2(load)) to the training loss (eq. 6-7 and appendix A). */
static const struct dl_op_desc moe_op = {
	.name = "mixture_of_experts",
	.doc = "y = sum_{i in topk(H)} softmax_k(H)_i expert_i(x), H = x W_g^T "
	       "(+ N(0,1) softplus(x W_noise^T) in training with noisy_gating), per token; "
	       "balance_loss w adds w (CV^2(importance) + CV^2(load)) to the training loss",
	.min_in = 1, .max_in = 1,
	.hp = moe_hp, .n_hp = N_HP,
	.infer = moe_infer, .forward = moe_forward, .backward = moe_backward,
	.flags = DL_OP_COMPLEX | DL_OP_BWD_NO_OUTPUT,
	.params = "gate.weight [num_experts, D]; noise.weight [num_experts, D] "
		  "(noisy_gating); experts.I.J.<param> of expert I's entry J",
	.has_aux_loss = moe_has_aux,
	.step = dl_step_rows,
};

const struct dl_op_desc *const dl_ops_moe[] = {&moe_op, NULL};
