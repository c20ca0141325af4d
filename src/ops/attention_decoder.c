/* attention_decoder: Bahdanau et al. 2015's decoder, a GRU or LSTM cell
 * that attends to a memory before each step. Per step t, with the query
 * h_(t-1): alpha_t = softmax(score(h_(t-1), memory)), c_t = alpha_t memory,
 * h_t = cell([x_t; c_t], h_(t-1)). The cell is PyTorch's nn.GRUCell or
 * nn.LSTMCell; the score is one of the `attention` op's, computed by its
 * kernels (src/ops/attention.h). One GEMM projects the inputs x of all
 * steps; per step, GEMMs do the context's and the recurrent products. */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/gemm.h"
#include "engine/op.h"
#include "engine/stepper.h"
#include "engine/vmath.h"
#include "ops/attention.h"

enum { AD_CELL, AD_HIDDEN, AD_SCORE, AD_SIZE, AD_OUTPUT, AD_BIAS, AD_COUNT };
enum { CELL_GRU, CELL_LSTM };
enum { OUT_SEQUENCE, OUT_LAST, OUT_ATTENTION };

static const struct dl_hp_desc ad_hp[] = {
	[AD_CELL] = {"cell", DL_HP_ENUM, "gru", "gru|lstm", 0},
	[AD_HIDDEN] = {"hidden_size", DL_HP_INT, NULL, NULL,
		       DL_HP_REQUIRED | DL_HP_POSITIVE},
	[AD_SCORE] = {"score", DL_HP_ENUM, "additive",
		      "scaled_dot|dot|bilinear|additive", 0},
	[AD_SIZE] = {"attention_size", DL_HP_INT, "hidden_size", NULL,
		     DL_HP_DERIVED | DL_HP_POSITIVE},
	[AD_OUTPUT] = {"output", DL_HP_ENUM, "sequence",
		       "sequence|last|attention", 0},
	[AD_BIAS] = {"bias", DL_HP_BOOL, "true", NULL, 0},
};

/* Parameters in declaration order; without bias the score's follow
 * weight_hh (ad_dims's ps). */
enum { P_WIH, P_WHH, P_BIH, P_BHH };

/* Sizes of one call, and where its buffers are. The store (ctx->saved in
 * training, else the start of ws) keeps, in floats: hs [N, T, H] (h_t),
 * cs [N, T, H] (lstm: c_t), gates [N, T, 4H] (gru r, z, n, W_hn h + b_hn;
 * lstm i, f, g, o), alpha [N, T, S], ctx [N, T, Dm]. The scratch follows
 * the store in ws. */
struct ad_dims {
	int lstm, out, bias, ps;                      /* ps: the score's first param */
	int N, T, Dx, S, Dm, H, G, GH, Din;
	struct dl_score sc;
	size_t hs, cs, gates, alpha, ctx, store;      /* floats */
	size_t tmpf;                                  /* score scratch */
};

static void ad_dims(const struct dl_node *n, const struct dl_shape *x,
		    const struct dl_shape *m, struct ad_dims *d)
{
	memset(d, 0, sizeof *d);
	d->lstm = n->hp[AD_CELL].i == CELL_LSTM;
	d->out = (int)n->hp[AD_OUTPUT].i;
	d->bias = (int)n->hp[AD_BIAS].i;
	d->ps = d->bias ? 4 : 2;
	d->N = (int)x->d[0];
	d->T = (int)x->d[1];
	d->Dx = (int)x->d[2];
	d->S = (int)m->d[1];
	d->Dm = (int)m->d[2];
	d->H = (int)n->hp[AD_HIDDEN].i;
	d->G = d->lstm ? 4 : 3;
	d->GH = d->G * d->H;
	d->Din = d->Dx + d->Dm;
	d->sc.score = (int)n->hp[AD_SCORE].i;
	d->sc.Tq = 1;
	d->sc.Tk = d->S;
	d->sc.dq = d->H;
	d->sc.dk = d->Dm;
	d->sc.A = d->sc.score == DL_SCORE_ADDITIVE
		  ? (int)(n->hp[AD_SIZE].set ? n->hp[AD_SIZE].i
					     : n->hp[AD_HIDDEN].i) : 0;
	size_t nt = (size_t)d->N * d->T, off = 0;
	d->hs = off;
	off += nt * d->H;
	d->cs = off;
	off += d->lstm ? nt * d->H : 0;
	d->gates = off;
	off += nt * 4 * d->H;
	d->alpha = off;
	off += nt * d->S;
	d->ctx = off;
	off += nt * d->Dm;
	d->store = (off + 15) / 16 * 16;
	d->tmpf = dl_score_tmp(&d->sc);
}

/* Scratch after the store, in floats: xw / dGi [N, T, GH], gh / dgh
 * [N, GH], zero, dh, dc [N, H], dctx [N, Dm], dalpha, ds [S], score tmp. */
struct ad_scratch {
	float *xw, *gh, *zero, *dh, *dc, *dctx, *dal, *ds, *tmp;
};

static size_t scratch_floats(const struct ad_dims *d)
{
	return (size_t)d->N * d->T * d->GH + (size_t)d->N * d->GH +
	       3 * (size_t)d->N * d->H + (size_t)d->N * d->Dm +
	       2 * (size_t)d->S + d->tmpf;
}

static void scratch_map(const struct ad_dims *d, void *ws,
			struct ad_scratch *s)
{
	float *p = (float *)ws + d->store;
	size_t nh = (size_t)d->N * d->H;
	s->xw = p; p += (size_t)d->N * d->T * d->GH;
	s->gh = p; p += (size_t)d->N * d->GH;
	s->zero = p; p += nh;
	s->dh = p; p += nh;
	s->dc = p; p += nh;
	s->dctx = p; p += (size_t)d->N * d->Dm;
	s->dal = p; p += d->S;
	s->ds = p; p += d->S;
	s->tmp = p;
}

static int ad_infer(struct dl_node *n, const struct dl_shape *in,
		    struct dl_shape *out, struct dl_error *err)
{
	char b[128], c[128], t[128];
	const struct dl_shape *x = &in[0], *m = &in[1];
	int lstm = n->hp[AD_CELL].i == CELL_LSTM;
	int score = (int)n->hp[AD_SCORE].i;
	int64_t H = n->hp[AD_HIDDEN].i;
	for (int k = 0; k < 2; k++) {
		if (in[k].ndim != 3 || in[k].d[1] <= 0 || in[k].d[2] <= 0)
			return dl_node_error(err, n, -1,
				"the %s has shape %s; attention_decoder needs sequences [N, T, features] (in: [targets, memory])",
				k ? "memory" : "targets",
				dl_shape_str(&in[k], b, sizeof b));
		if (in[k].d[1] > INT_MAX / 4 || in[k].d[2] > INT_MAX / 4 ||
		    in[k].d[0] > INT_MAX)
			return dl_node_error(err, n, -1, "the %s %s is too large",
					     k ? "memory" : "targets",
					     dl_shape_str(&in[k], b, sizeof b));
	}
	if (m->d[0] != x->d[0])
		return dl_node_error(err, n, -1,
			"the targets %s and the memory %s have different batch sizes",
			dl_shape_str(x, b, sizeof b), dl_shape_str(m, c, sizeof c));
	if (n->n_in > 3 && !lstm)
		return dl_node_error(err, n, -1,
			"takes [targets, memory, h0] with cell: gru; a fourth input (c0) needs cell: lstm");
	/* [N, H], or [N, 1, H]: the output: state of a one-layer, one-way
	 * rnn, lstm or gru, which is the same memory */
	int64_t hd[3] = {x->d[0], 1, H}, hd2[2] = {x->d[0], H};
	struct dl_shape hs = dl_shape_make(2, hd2), hs3 = dl_shape_make(3, hd);
	for (int k = 2; k < n->n_in; k++)
		if (!dl_shape_equal(&in[k], &hs) && !dl_shape_equal(&in[k], &hs3))
			return dl_node_error(err, n, -1,
				"the initial %s has shape %s; it must be %s ([N, hidden_size]) or %s (a one-layer state)",
				k == 2 ? "hidden state h0" : "cell state c0",
				dl_shape_str(&in[k], b, sizeof b),
				dl_shape_str(&hs, c, sizeof c),
				dl_shape_str(&hs3, t, sizeof t));
	if (score != DL_SCORE_ADDITIVE && n->hp[AD_SIZE].set)
		return dl_node_error(err, n, AD_SIZE,
			"attention_size applies to the additive score only");
	if ((score == DL_SCORE_DOT || score == DL_SCORE_SCALED_DOT) &&
	    H != m->d[2])
		return dl_node_error(err, n, AD_SCORE,
			"the %s score compares the hidden state (hidden_size %lld) with the memory's %lld features; they must be equal (or use score: additive or bilinear)",
			score == DL_SCORE_DOT ? "dot" : "scaled_dot", (long long)H,
			(long long)m->d[2]);
	int64_t G = lstm ? 4 : 3, Din = x->d[2] + m->d[2];
	int64_t A = n->hp[AD_SIZE].set ? n->hp[AD_SIZE].i : H;
	if (H > INT_MAX / 8 || A > INT_MAX / 4 ||
	    (double)x->d[0] * x->d[1] *
	    (double)(G * H + Din + m->d[1] + 6 * H) > (double)DL_MAX_NUMEL ||
	    (double)(m->d[1] + 1) * (double)A > 1e9)
		return dl_node_error(err, n, -1, "the inputs are too large");
	/* PyTorch's GRUCell / LSTMCell: U(-1/sqrt(H), 1/sqrt(H)) */
	double bound = 1.0 / sqrt((double)H);
	int64_t wi[2] = {G * H, Din}, wh[2] = {G * H, H}, bl = G * H;
	struct dl_shape wis = dl_shape_make(2, wi), whs = dl_shape_make(2, wh);
	struct dl_shape bs = dl_shape_make(1, &bl);
	int rc = dl_node_param(n, "cell.weight_ih", &wis, DL_INIT_UNIFORM,
			       bound, err);
	if (rc >= 0)
		rc = dl_node_param(n, "cell.weight_hh", &whs, DL_INIT_UNIFORM,
				   bound, err);
	if (rc >= 0 && n->hp[AD_BIAS].i)
		rc = dl_node_param(n, "cell.bias_ih", &bs, DL_INIT_UNIFORM,
				   bound, err);
	if (rc >= 0 && n->hp[AD_BIAS].i)
		rc = dl_node_param(n, "cell.bias_hh", &bs, DL_INIT_UNIFORM,
				   bound, err);
	/* the score's parameters and init as the attention op's */
	if (rc >= 0 && score == DL_SCORE_BILINEAR) {
		int64_t wd[2] = {H, m->d[2]};
		struct dl_shape ws = dl_shape_make(2, wd);
		rc = dl_node_param(n, "weight", &ws, DL_INIT_UNIFORM,
				   1.0 / sqrt((double)m->d[2]), err);
	} else if (rc >= 0 && score == DL_SCORE_ADDITIVE) {
		int64_t wd[2] = {A, H + m->d[2]}, w2d[2] = {1, A};
		struct dl_shape ws = dl_shape_make(2, wd);
		struct dl_shape w2s = dl_shape_make(2, w2d);
		rc = dl_node_param(n, "w.weight", &ws, DL_INIT_UNIFORM,
				   1.0 / sqrt((double)(H + m->d[2])), err);
		if (rc >= 0)
			rc = dl_node_param(n, "w2.weight", &w2s, DL_INIT_UNIFORM,
					   1.0 / sqrt((double)A), err);
	}
	if (rc < 0)
		return rc;
	struct ad_dims d;
	ad_dims(n, x, m, &d);
	int64_t N = x->d[0], T = x->d[1], S = m->d[1], Dm = m->d[2];
	if (d.out == OUT_SEQUENCE) {
		int64_t od[3] = {N, T, H};
		*out = dl_shape_make(3, od);
	} else if (d.out == OUT_LAST) {
		*out = hs;
	} else {
		int64_t od[3] = {N, T, S};
		*out = dl_shape_make(3, od);
	}
	n->saved_bytes = d.store * sizeof(float);
	n->ws_bytes = (d.store + scratch_floats(&d)) * sizeof(float);
	int64_t sm = score == DL_SCORE_BILINEAR ? H * Dm + S * Dm
		     : score == DL_SCORE_ADDITIVE ? (H + S * Dm + S) * A
		     : S * Dm;
	n->macs = N * T * (G * H * (Din + H) + sm + S * Dm);
	return 0;
}

static float sigm(float v)
{
	return 1.0f / (1.0f + expf(-v));
}

/* bias b's element j; 0 without bias (b NULL) */
static inline float bias_at(const float *b, int j)
{
	return b ? b[j] : 0.0f;
}

/* The score's parameters (and their gradients when grads). */
static void score_params(const struct dl_node *n, struct ad_dims *d,
			 int grads)
{
	if (d->sc.score == DL_SCORE_BILINEAR ||
	    d->sc.score == DL_SCORE_ADDITIVE) {
		d->sc.W = n->params[d->ps].data;
		d->sc.dW = grads ? n->params[d->ps].grad : NULL;
	}
	if (d->sc.score == DL_SCORE_ADDITIVE) {
		d->sc.w2 = n->params[d->ps + 1].data;
		d->sc.dw2 = grads ? n->params[d->ps + 1].grad : NULL;
	}
}

/* The previous hidden (and cell) state of step t: h0, zeros or the store;
 * *ld its row stride. */
static const float *prev_state(const struct ad_dims *d, const float *st,
			       const float *init, const float *zero, int t,
			       int *ld)
{
	if (t > 0) {
		*ld = d->T * d->H;
		return st + (size_t)(t - 1) * d->H;
	}
	*ld = d->H;
	return init ? init : zero;
}

/* the attention weights of one step over the S memory positions */
DL_CLONES static void scores_softmax(float *al, int S)
{
	dl_row_softmax(al, al, S);
}

/* Stepped: targets on the tokens, the memory fixed; each sequence keeps
 * its last h (and c for lstm). */
static int ad_step(struct dl_node *n, const struct dl_shape *in,
		   const int *in_axis, int *out_axis, int64_t max_len,
		   struct dl_error *err)
{
	(void)in;
	(void)max_len;
	if (in_axis[0] != 2)
		return dl_node_error(err, n, -1,
			"its targets' steps are not the token positions, so the model cannot be "
			"decoded step by step");
	for (int k = 1; k < n->n_in; k++)
		if (in_axis[k])
			return dl_node_error(err, n, -1,
				"its memory or initial state depends on the tokens, so the model "
				"cannot be decoded step by step");
	if (n->hp[AD_OUTPUT].i == OUT_LAST)
		return dl_node_error(err, n, AD_OUTPUT,
			"its output is its final state, not one value per token, so the model "
			"cannot be decoded step by step (give output: sequence)");
	out_axis[0] = 2;
	n->step_floats = (size_t)(n->hp[AD_CELL].i == CELL_LSTM ? 2 : 1) *
			 (size_t)n->hp[AD_HIDDEN].i;
	return 0;
}

static void ad_fwd(struct dl_node *n, const struct dl_tensor *in,
		   struct dl_tensor *out, struct dl_ctx *ctx)
{
	struct ad_dims d;
	struct ad_scratch s;
	ad_dims(n, &in[0].shape, &in[1].shape, &d);
	score_params(n, &d, 0);
	scratch_map(&d, ctx->ws, &s);
	float *store = ctx->saved ? (float *)ctx->saved : (float *)ctx->ws;
	float *hs = store + d.hs, *cs = store + d.cs, *gates = store + d.gates;
	float *alpha = store + d.alpha, *cx = store + d.ctx;
	const float *x = in[0].data, *mem = in[1].data;
	const float *h0 = n->n_in > 2 ? in[2].data : NULL;
	const float *c0 = n->n_in > 3 ? in[3].data : NULL;
	const float *wih = n->params[P_WIH].data, *whh = n->params[P_WHH].data;
	const float *bih = d.bias ? n->params[P_BIH].data : NULL;
	const float *bhh = d.bias ? n->params[P_BHH].data : NULL;
	int N = d.N, T = d.T, H = d.H, S = d.S, Dm = d.Dm, GH = d.GH;
	memset(s.zero, 0, (size_t)N * H * sizeof(float));
	/* stepped: each sequence's state (h0, c0 or zeros when it starts)
	 * gathered into the backward's scratch rows for the first step */
	float *st = NULL;
	if (dl_stepping(n, ctx) && n->step_state) {
		st = n->step_state + (size_t)ctx->step->row0 * n->step_floats;
		for (int b = 0; b < N; b++) {
			float *sb = st + (size_t)b * n->step_floats;
			if (ctx->step->pos[b] == 0) {
				memcpy(sb, h0 ? h0 + (size_t)b * H : s.zero, (size_t)H * sizeof(float));
				if (d.lstm)
					memcpy(sb + H, c0 ? c0 + (size_t)b * H : s.zero,
					       (size_t)H * sizeof(float));
			}
			memcpy(s.dh + (size_t)b * H, sb, (size_t)H * sizeof(float));
			if (d.lstm)
				memcpy(s.dc + (size_t)b * H, sb + H, (size_t)H * sizeof(float));
		}
		h0 = s.dh;
		c0 = d.lstm ? s.dc : NULL;
	}
	/* the inputs' part of the gates, every step at once */
	dl_sgemm(0, 1, N * T, GH, d.Dx, 1.0f, x, d.Dx, wih, d.Din, 0.0f, s.xw,
		 GH);
	for (int64_t r = 0; bih && r < (int64_t)N * T; r++)
		for (int j = 0; j < GH; j++)
			s.xw[r * GH + j] += bih[j];
	for (int t = 0; t < T; t++) {
		int ld, ldc = 0;
		const float *hp = prev_state(&d, hs, h0, s.zero, t, &ld);
		const float *cp = d.lstm ? prev_state(&d, cs, c0, s.zero, t,
						      &ldc) : NULL;
		for (int b = 0; b < N; b++) {
			float *al = alpha + ((size_t)b * T + t) * S;
			const float *mb = mem + (size_t)b * S * Dm;
			dl_score_forward(&d.sc, hp + (size_t)b * ld, H, mb, Dm,
					 al, s.tmp);
			scores_softmax(al, S);
			dl_sgemm(0, 0, 1, Dm, S, 1.0f, al, S, mb, Dm, 0.0f,
				 cx + ((size_t)b * T + t) * Dm, Dm);
		}
		/* gates: x part + context part, and the recurrent part */
		dl_sgemm(0, 1, N, GH, Dm, 1.0f, cx + (size_t)t * Dm, T * Dm,
			 wih + d.Dx, d.Din, 1.0f, s.xw + (size_t)t * GH, T * GH);
		dl_sgemm(0, 1, N, GH, H, 1.0f, hp, ld, whh, H, 0.0f, s.gh, GH);
		for (int b = 0; b < N; b++) {
			const float *gi = s.xw + ((size_t)b * T + t) * GH;
			const float *gh = s.gh + (size_t)b * GH;
			const float *h = hp + (size_t)b * ld;
			float *g = gates + ((size_t)b * T + t) * 4 * H;
			float *ho = hs + ((size_t)b * T + t) * H;
			for (int j = 0; j < H; j++) {
				if (d.lstm) {
					float ig = sigm(gi[j] + gh[j] + bias_at(bhh, j));
					float fg = sigm(gi[H + j] + gh[H + j] +
							bias_at(bhh, H + j));
					float gg = tanhf(gi[2 * H + j] + gh[2 * H + j] +
							 bias_at(bhh, 2 * H + j));
					float og = sigm(gi[3 * H + j] + gh[3 * H + j] +
							bias_at(bhh, 3 * H + j));
					float cc = fg * cp[(size_t)b * ldc + j] + ig * gg;
					g[j] = ig;
					g[H + j] = fg;
					g[2 * H + j] = gg;
					g[3 * H + j] = og;
					cs[((size_t)b * T + t) * H + j] = cc;
					ho[j] = og * tanhf(cc);
				} else {
					float r = sigm(gi[j] + gh[j] + bias_at(bhh, j));
					float z = sigm(gi[H + j] + gh[H + j] +
						       bias_at(bhh, H + j));
					float hn = gh[2 * H + j] + bias_at(bhh, 2 * H + j);
					float nn = tanhf(gi[2 * H + j] + r * hn);
					g[j] = r;
					g[H + j] = z;
					g[2 * H + j] = nn;
					g[3 * H + j] = hn;
					ho[j] = (1.0f - z) * nn + z * h[j];
				}
			}
		}
	}
	for (int b = 0; st && b < N; b++) {
		float *sb = st + (size_t)b * n->step_floats;
		memcpy(sb, hs + ((size_t)b * T + T - 1) * H, (size_t)H * sizeof(float));
		if (d.lstm)
			memcpy(sb + H, cs + ((size_t)b * T + T - 1) * H, (size_t)H * sizeof(float));
	}
	if (d.out == OUT_SEQUENCE)
		memcpy(out->data, hs, (size_t)N * T * H * sizeof(float));
	else if (d.out == OUT_ATTENTION)
		memcpy(out->data, alpha, (size_t)N * T * S * sizeof(float));
	else
		for (int b = 0; b < N; b++)
			memcpy(out->data + (size_t)b * H,
			       hs + ((size_t)b * T + T - 1) * H,
			       (size_t)H * sizeof(float));
}

/* Back-propagation through time over the store of the training forward. */
static void ad_bwd(struct dl_node *n, const struct dl_tensor *in,
		   const struct dl_tensor *out, const float *dout,
		   float *const *din, struct dl_ctx *ctx)
{
	struct ad_dims d;
	struct ad_scratch s;
	ad_dims(n, &in[0].shape, &in[1].shape, &d);
	score_params(n, &d, 1);
	scratch_map(&d, ctx->ws, &s);
	const float *store = ctx->saved;
	const float *hs = store + d.hs, *cs = store + d.cs;
	const float *gates = store + d.gates, *alpha = store + d.alpha;
	const float *cx = store + d.ctx;
	const float *x = in[0].data, *mem = in[1].data;
	const float *h0 = n->n_in > 2 ? in[2].data : NULL;
	const float *c0 = n->n_in > 3 ? in[3].data : NULL;
	float *dx = din[0], *dmem = din[1];
	float *dh0 = n->n_in > 2 ? din[2] : NULL;
	float *dc0 = n->n_in > 3 ? din[3] : NULL;
	const float *wih = n->params[P_WIH].data, *whh = n->params[P_WHH].data;
	float *dwih = n->params[P_WIH].grad, *dwhh = n->params[P_WHH].grad;
	float *dbih = d.bias ? n->params[P_BIH].grad : NULL;
	float *dbhh = d.bias ? n->params[P_BHH].grad : NULL;
	int N = d.N, T = d.T, H = d.H, S = d.S, Dm = d.Dm, GH = d.GH;
	size_t nh = (size_t)N * H;
	float *dgi = s.xw, *dgh = s.gh;
	memset(s.zero, 0, nh * sizeof(float));
	memset(s.dh, 0, nh * sizeof(float));
	memset(s.dc, 0, nh * sizeof(float));
	for (int t = T - 1; t >= 0; t--) {
		int ld, ldc = 0;
		const float *hp = prev_state(&d, hs, h0, s.zero, t, &ld);
		const float *cp = d.lstm ? prev_state(&d, cs, c0, s.zero, t,
						      &ldc) : NULL;
		/* dh: dL/dh_t; then the gates', and dh becomes dL/dh_(t-1)'s
		 * direct part */
		for (int b = 0; b < N; b++) {
			const float *g = gates + ((size_t)b * T + t) * 4 * H;
			const float *h = hp + (size_t)b * ld;
			float *dh = s.dh + (size_t)b * H, *dc = s.dc + (size_t)b * H;
			float *gi = dgi + ((size_t)b * T + t) * GH;
			float *gh = dgh + (size_t)b * GH;
			const float *dy = NULL;
			if (d.out == OUT_SEQUENCE)
				dy = dout + ((size_t)b * T + t) * H;
			else if (d.out == OUT_LAST && t == T - 1)
				dy = dout + (size_t)b * H;
			for (int j = 0; j < H; j++) {
				float dhj = dh[j] + (dy ? dy[j] : 0.0f);
				if (d.lstm) {
					float ig = g[j], fg = g[H + j], gg = g[2 * H + j];
					float og = g[3 * H + j];
					float tc = tanhf(cs[((size_t)b * T + t) * H + j]);
					float dcj = dc[j] + dhj * og * (1.0f - tc * tc);
					float di = dcj * gg;
					float df = dcj * cp[(size_t)b * ldc + j];
					float dg = dcj * ig, dor = dhj * tc;
					gi[j] = gh[j] = di * ig * (1.0f - ig);
					gi[H + j] = gh[H + j] = df * fg * (1.0f - fg);
					gi[2 * H + j] = gh[2 * H + j] = dg * (1.0f - gg * gg);
					gi[3 * H + j] = gh[3 * H + j] = dor * og * (1.0f - og);
					dc[j] = dcj * fg;
					dh[j] = 0.0f;
				} else {
					float r = g[j], z = g[H + j], nn = g[2 * H + j];
					float hn = g[3 * H + j];
					float dnp = dhj * (1.0f - z) * (1.0f - nn * nn);
					float dz = dhj * (h[j] - nn);
					gi[H + j] = gh[H + j] = dz * z * (1.0f - z);
					gi[2 * H + j] = dnp;
					gh[2 * H + j] = dnp * r;
					float dr = dnp * hn;
					gi[j] = gh[j] = dr * r * (1.0f - r);
					dh[j] = dhj * z;
				}
			}
		}
		if (dwhh)
			dl_sgemm(1, 0, GH, H, N, 1.0f, dgh, GH, hp, ld, 1.0f, dwhh,
				 H);
		dl_sgemm(0, 0, N, H, GH, 1.0f, dgh, GH, whh, H, 1.0f, s.dh, H);
		if (dbhh)
			for (int b = 0; b < N; b++)
				for (int j = 0; j < GH; j++)
					dbhh[j] += dgh[(size_t)b * GH + j];
		/* the context's gradient, then the attention's */
		dl_sgemm(0, 0, N, Dm, GH, 1.0f, dgi + (size_t)t * GH, T * GH,
			 wih + d.Dx, d.Din, 0.0f, s.dctx, Dm);
		for (int b = 0; b < N; b++) {
			const float *al = alpha + ((size_t)b * T + t) * S;
			const float *mb = mem + (size_t)b * S * Dm;
			const float *dcb = s.dctx + (size_t)b * Dm;
			dl_sgemm(0, 1, 1, S, Dm, 1.0f, dcb, Dm, mb, Dm, 0.0f, s.dal,
				 S);
			if (d.out == OUT_ATTENTION) {
				const float *da = dout + ((size_t)b * T + t) * S;
				for (int j = 0; j < S; j++)
					s.dal[j] += da[j];
			}
			if (dmem)
				dl_sgemm(1, 0, S, Dm, 1, 1.0f, al, S, dcb, Dm, 1.0f,
					 dmem + (size_t)b * S * Dm, Dm);
			double dot = 0.0;
			for (int j = 0; j < S; j++)
				dot += (double)al[j] * s.dal[j];
			for (int j = 0; j < S; j++)
				s.ds[j] = al[j] * (s.dal[j] - (float)dot);
			dl_score_backward(&d.sc, hp + (size_t)b * ld, H, mb, Dm,
					  s.ds, s.dh + (size_t)b * H, H,
					  dmem ? dmem + (size_t)b * S * Dm : NULL,
					  Dm, s.tmp);
		}
	}
	for (size_t k = 0; k < nh; k++) {
		if (dh0)
			dh0[k] += s.dh[k];
		if (dc0)
			dc0[k] += s.dc[k];
	}
	int NT = N * T;
	if (dx)
		dl_sgemm(0, 0, NT, d.Dx, GH, 1.0f, dgi, GH, wih, d.Din, 1.0f, dx,
			 d.Dx);
	if (dwih) {
		dl_sgemm(1, 0, GH, d.Dx, NT, 1.0f, dgi, GH, x, d.Dx, 1.0f, dwih,
			 d.Din);
		dl_sgemm(1, 0, GH, Dm, NT, 1.0f, dgi, GH, cx, Dm, 1.0f,
			 dwih + d.Dx, d.Din);
	}
	if (dbih)
		for (int64_t r = 0; r < NT; r++)
			for (int j = 0; j < GH; j++)
				dbih[j] += dgi[r * GH + j];
}

/* alpha_t = softmax(score(h_(t-1), M)); c_t = alpha_t M;
 * h_t = GRUCell / LSTMCell([x_t; c_t], h_(t-1)) (Bahdanau et al. 2015) */
static const struct dl_op_desc op_attention_decoder = {
	.name = "attention_decoder",
	.doc = "h_t = cell([x_t; c_t], h_(t-1)), c_t = softmax(score(h_(t-1), M)) M; in: [targets, memory, h0, c0]",
	.min_in = 2, .max_in = 4,
	.hp = ad_hp, .n_hp = AD_COUNT,
	.infer = ad_infer,
	.forward = ad_fwd,
	.backward = ad_bwd,
	.step = ad_step,
	.flags = DL_OP_COMPLEX | DL_OP_BWD_NO_OUTPUT,
	.params = "cell.weight_ih [G*hidden_size, D_x + D_m], cell.weight_hh [G*hidden_size, hidden_size], cell.bias_ih [G*hidden_size], cell.bias_hh [G*hidden_size] (bias: true) (G = 3 gru, 4 lstm); bilinear: weight [hidden_size, D_m]; additive: w.weight [attention_size, hidden_size + D_m], w2.weight [1, attention_size]",
};

const struct dl_op_desc *const dl_ops_attention_decoder[] = {
	&op_attention_decoder, NULL};
