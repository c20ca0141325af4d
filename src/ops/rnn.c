/* Recurrent layers: rnn (Elman, tanh or relu, or sigmoid, which PyTorch
 * lacks), lstm and gru, PyTorch's nn.RNN / nn.LSTM / nn.GRU with
 * batch_first=True, stacked and optionally bidirectional, plus gru's
 * ONNX/Keras variant (linear_before_reset: false). `output: state` gives
 * h_n of every layer and direction (lstm: h_n and c_n, two outputs).
 * Per layer and direction: one GEMM projects the inputs of all time steps,
 * then one GEMM per step does the recurrent product. macs: those products. */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "engine/gemm.h"
#include "engine/op.h"
#include "engine/stepper.h"

#define PAR_MIN 32768 /* elements below which a loop stays serial */

enum { KIND_RNN, KIND_LSTM, KIND_GRU };

enum {
	HP_INPUT, HP_HIDDEN, HP_LAYERS, HP_BIAS, HP_BATCH_FIRST, HP_DROPOUT,
	HP_BIDIR, HP_OUTPUT,
	HP_EXTRA, /* rnn: nonlinearity; gru: linear_before_reset */
};

enum { OUT_SEQUENCE, OUT_LAST, OUT_STATE };
enum { ACT_TANH, ACT_RELU, ACT_SIGMOID };

#define COMMON_HP \
	[HP_INPUT] = {"input_size", DL_HP_INT, "inferred", NULL, \
		      DL_HP_DERIVED | DL_HP_POSITIVE}, \
	[HP_HIDDEN] = {"hidden_size", DL_HP_INT, NULL, NULL, \
		       DL_HP_REQUIRED | DL_HP_POSITIVE}, \
	[HP_LAYERS] = {"num_layers", DL_HP_INT, "1", NULL, DL_HP_POSITIVE}, \
	[HP_BIAS] = {"bias", DL_HP_BOOL, "true", NULL, 0}, \
	[HP_BATCH_FIRST] = {"batch_first", DL_HP_BOOL, "true", NULL, 0}, \
	[HP_DROPOUT] = {"dropout", DL_HP_FLOAT, "0", NULL, DL_HP_NONNEG}, \
	[HP_BIDIR] = {"bidirectional", DL_HP_BOOL, "false", NULL, 0}, \
	[HP_OUTPUT] = {"output", DL_HP_ENUM, "sequence", "sequence|last|state", 0}

static const struct dl_hp_desc rnn_hp[] = {
	COMMON_HP,
	[HP_EXTRA] = {"nonlinearity", DL_HP_ENUM, "tanh", "tanh|relu|sigmoid", 0},
};
static const struct dl_hp_desc lstm_hp[] = {COMMON_HP};
static const struct dl_hp_desc gru_hp[] = {
	COMMON_HP,
	[HP_EXTRA] = {"linear_before_reset", DL_HP_BOOL, "true", NULL, 0},
};

#define MAX_LAYERS 64

/* Everything a call needs, from the node and the input shapes. */
struct rnn_dims {
	int kind, act, lbr;   /* act: rnn's nonlinearity; lbr: gru's
	                       * linear_before_reset */
	int N, T, I, H, L, D, G;
	int S;                /* per-step floats kept per direction: lstm
	                       * i f g o c (5H), gru r z n hn (4H), rnn 0 */
	int last, state;      /* output: last, output: state */
	int h0ld;             /* floats between the samples' h0 (and c0):
	                       * L*D*H for the inputs, more for a stepped
	                       * call's state */
	int bias, drop;       /* drop: dropout between layers (p > 0, L > 1) */
	double p;
	/* training: float offsets into ctx->saved */
	size_t y[MAX_LAYERS], a[MAX_LAYERS], xd[MAX_LAYERS]; /* per layer: Y_l [N, T, D*H], the gate
	                              * activations [D, N, T, S], the dropped
	                              * input of layer l [N, T, D*H] */
	size_t mask;          /* byte offset: masks [L-1, N, T, D*H] */
	size_t store_bytes;
	/* inference keeps less (ws, no ctx->saved): two Y_l [N, T, D*H]
	 * used in turn, and the gates of two steps [N, 2, S] */
	size_t cy[2], ca, compact_bytes;
};

static void rnn_dims(const struct dl_node *n, const struct dl_shape *x,
		     struct rnn_dims *r)
{
	memset(r, 0, sizeof *r);
	r->kind = n->op->name[0] == 'r' ? KIND_RNN
		  : n->op->name[0] == 'l' ? KIND_LSTM : KIND_GRU;
	r->act = r->kind == KIND_RNN ? (int)n->hp[HP_EXTRA].i : ACT_TANH;
	r->lbr = r->kind == KIND_GRU ? (int)n->hp[HP_EXTRA].i : 1;
	r->N = (int)x->d[0];
	r->T = (int)x->d[1];
	r->I = (int)x->d[2];
	r->H = (int)n->hp[HP_HIDDEN].i;
	r->L = (int)n->hp[HP_LAYERS].i;
	r->D = n->hp[HP_BIDIR].i ? 2 : 1;
	r->G = r->kind == KIND_RNN ? 1 : r->kind == KIND_LSTM ? 4 : 3;
	r->S = r->kind == KIND_RNN ? 0 : r->kind == KIND_LSTM ? 5 * r->H : 4 * r->H;
	r->h0ld = r->L * r->D * r->H;
	r->last = n->hp[HP_OUTPUT].i == OUT_LAST;
	r->state = n->hp[HP_OUTPUT].i == OUT_STATE;
	r->bias = (int)n->hp[HP_BIAS].i;
	r->p = n->hp[HP_DROPOUT].f;
	r->drop = r->p > 0.0 && r->L > 1;
	size_t ntdh = (size_t)r->N * r->T * r->D * r->H, off = 0;
	for (int l = 0; l < r->L && l < MAX_LAYERS; l++) {
		r->y[l] = off;
		off += ntdh;
		r->a[l] = off;
		off += (size_t)r->D * r->N * r->T * r->S;
		r->xd[l] = off;
		if (l > 0 && r->drop)
			off += ntdh;
	}
	r->mask = off * sizeof(float);
	r->store_bytes = r->mask + (r->drop ? (size_t)(r->L - 1) * ntdh : 0);
	r->store_bytes = (r->store_bytes + 63) / 64 * 64;
	r->cy[0] = 0;
	r->cy[1] = r->L > 1 ? ntdh : 0;
	r->ca = r->cy[1] + ntdh;
	r->compact_bytes = (r->ca + (size_t)r->N * 2 * r->S) * sizeof(float);
	r->compact_bytes = (r->compact_bytes + 63) / 64 * 64;
}

/* Scratch in ws after the inference store, in floats: XW/dGi [N, T, G*H],
 * R/dGh [N, G*H], zeros, rh, drh, dh, dc [N, H] each, dYa, dYb, dX [N, T, D*H],
 * then two double accumulators [G*H]. */
struct rnn_scratch {
	float *xw, *rg, *zero, *rh, *drh, *dh, *dc, *dya, *dyb, *dx;
	double *acc_ih, *acc_hh;
};

static size_t scratch_floats(const struct rnn_dims *r)
{
	size_t nt = (size_t)r->N * r->T, gh = (size_t)r->G * r->H;
	size_t f = nt * gh + (size_t)r->N * gh + 5 * (size_t)r->N * r->H +
		   3 * nt * r->D * r->H;
	return (f + 1) / 2 * 2; /* the doubles that follow stay aligned */
}

static void scratch_map(const struct rnn_dims *r, void *ws,
			struct rnn_scratch *s)
{
	float *p = (float *)((char *)ws + r->compact_bytes);
	size_t nt = (size_t)r->N * r->T, gh = (size_t)r->G * r->H;
	size_t nh = (size_t)r->N * r->H, ntdh = nt * r->D * r->H;
	s->xw = p; p += nt * gh;
	s->rg = p; p += (size_t)r->N * gh;
	s->zero = p; p += nh;
	s->rh = p; p += nh;
	s->drh = p; p += nh;
	s->dh = p; p += nh;
	s->dc = p; p += nh;
	s->dya = p; p += ntdh;
	s->dyb = p; p += ntdh;
	s->dx = p;
	double *q = (double *)((char *)ws + r->compact_bytes +
			       scratch_floats(r) * sizeof(float));
	s->acc_ih = q;
	s->acc_hh = q + gh;
}

/* Parameter names: weight_ih_l{l}{_reverse}, ... kept in a static table
 * of literals built on first use (names must outlive the node). */
static char name_buf[4][2][MAX_LAYERS][24];

static const char *pname(int which, int l, int d)
{
	static const char *const base[4] = {"weight_ih", "weight_hh", "bias_ih",
					    "bias_hh"};
	char *b = name_buf[which][d][l];
	if (!b[0])
		snprintf(b, sizeof name_buf[0][0][0], "%s_l%d%s", base[which], l,
			 d ? "_reverse" : "");
	return b;
}

/* parameter index of kind `which` (0 w_ih, 1 w_hh, 2 b_ih, 3 b_hh) */
static int pidx(const struct rnn_dims *r, int which, int l, int d)
{
	int per = r->bias ? 4 : 2;
	return (l * r->D + d) * per + which;
}

static int rnn_infer(struct dl_node *n, const struct dl_shape *in,
		     struct dl_shape *out, struct dl_error *err)
{
	char s[128], t[128];
	const struct dl_shape *x = &in[0];
	if (!n->hp[HP_BATCH_FIRST].i)
		return dl_node_error(err, n, HP_BATCH_FIRST,
			"batch_first is false; dlrun is always batch first ([N, T, features]): remove it or set it to true");
	if (x->ndim != 3)
		return dl_node_error(err, n, -1,
			"the input has shape %s; %s needs a sequence [N, T, features]",
			dl_shape_str(x, s, sizeof s), n->op->name);
	if (x->d[1] <= 0 || x->d[2] <= 0)
		return dl_node_error(err, n, -1,
			"the input %s has no time steps or no features",
			dl_shape_str(x, s, sizeof s));
	if (n->hp[HP_INPUT].set && n->hp[HP_INPUT].i != x->d[2])
		return dl_node_error(err, n, HP_INPUT,
			"input_size is %lld but the input %s has %lld features",
			(long long)n->hp[HP_INPUT].i, dl_shape_str(x, s, sizeof s),
			(long long)x->d[2]);
	double p = n->hp[HP_DROPOUT].f;
	if (!(p >= 0.0 && p <= 1.0))
		return dl_node_error(err, n, HP_DROPOUT,
			"dropout is %g; a probability is between 0 and 1", p);
	if (n->hp[HP_LAYERS].i > MAX_LAYERS)
		return dl_node_error(err, n, HP_LAYERS,
			"num_layers is %lld; at most %d are supported",
			(long long)n->hp[HP_LAYERS].i, MAX_LAYERS);
	int64_t H = n->hp[HP_HIDDEN].i, L = n->hp[HP_LAYERS].i;
	int64_t D = n->hp[HP_BIDIR].i ? 2 : 1;
	int64_t G = n->op->name[0] == 'r' ? 1 : n->op->name[0] == 'l' ? 4 : 3;
	int64_t big = x->d[2] > D * H ? x->d[2] : D * H;
	if (H > INT_MAX / 8 || x->d[0] > INT_MAX || x->d[1] > INT_MAX ||
	    big > INT_MAX ||
	    (double)x->d[0] * x->d[1] * (double)(G * H > big ? G * H : big) *
	    (double)(L + 5) > (double)DL_MAX_NUMEL)
		return dl_node_error(err, n, -1, "the input %s is too large",
				     dl_shape_str(x, s, sizeof s));
	int64_t sd[3] = {x->d[0], D * L, H};
	struct dl_shape hs = dl_shape_make(3, sd);
	for (int k = 1; k < n->n_in; k++)
		if (!dl_shape_equal(&in[k], &hs))
			return dl_node_error(err, n, -1,
				"the initial %s has shape %s; it must be %s ([N, D*num_layers, hidden_size], batch first)",
				k == 1 ? "hidden state h0" : "cell state c0",
				dl_shape_str(&in[k], s, sizeof s),
				dl_shape_str(&hs, t, sizeof t));

	double bound = 1.0 / sqrt((double)H);
	int64_t macs = 0;
	for (int l = 0; l < L; l++)
		for (int d = 0; d < D; d++) {
			int64_t in_l = l == 0 ? x->d[2] : D * H;
			int64_t wi[2] = {G * H, in_l}, wh[2] = {G * H, H}, b = G * H;
			struct dl_shape ws = dl_shape_make(2, wi);
			struct dl_shape hsh = dl_shape_make(2, wh);
			struct dl_shape bs = dl_shape_make(1, &b);
			int rc = dl_node_param(n, pname(0, l, d), &ws,
					       DL_INIT_UNIFORM, bound, err);
			if (rc >= 0)
				rc = dl_node_param(n, pname(1, l, d), &hsh,
						   DL_INIT_UNIFORM, bound, err);
			if (rc >= 0 && n->hp[HP_BIAS].i)
				rc = dl_node_param(n, pname(2, l, d), &bs,
						   DL_INIT_UNIFORM, bound, err);
			if (rc >= 0 && n->hp[HP_BIAS].i)
				rc = dl_node_param(n, pname(3, l, d), &bs,
						   DL_INIT_UNIFORM, bound, err);
			if (rc < 0)
				return rc;
			macs += x->d[0] * x->d[1] * (in_l + H) * G * H;
		}
	struct rnn_dims r;
	rnn_dims(n, x, &r);
	if (n->hp[HP_OUTPUT].i == OUT_LAST) {
		int64_t od[2] = {x->d[0], D * H};
		*out = dl_shape_make(2, od);
	} else if (n->hp[HP_OUTPUT].i == OUT_STATE) {
		out[0] = hs;
		if (r.kind == KIND_LSTM)
			out[1] = hs;   /* c_n */
	} else {
		int64_t od[3] = {x->d[0], x->d[1], D * H};
		*out = dl_shape_make(3, od);
	}
	n->saved_bytes = r.store_bytes;
	n->ws_bytes = r.compact_bytes + scratch_floats(&r) * sizeof(float) +
		      2 * (size_t)G * H * sizeof(double);
	n->macs = macs;
	return 0;
}

static float sigm(float v)
{
	return 1.0f / (1.0f + expf(-v));
}

/* Where layer l, direction d reads its previous hidden state for the step
 * at time t (first: the direction's first step): h0, zeros or Y_l. */
static const float *h_prev(const struct rnn_dims *r, const float *y,
			   const float *h0, const float *zero, int l, int d,
			   int t, int first, int *ld)
{
	if (first) {
		if (h0) {
			*ld = r->h0ld;
			return h0 + (size_t)(l * r->D + d) * r->H;
		}
		*ld = r->H;
		return zero;
	}
	*ld = r->T * r->D * r->H;
	return y + ((size_t)(d ? t + 1 : t - 1) * r->D + d) * r->H;
}

/* One layer, one direction, forward over all steps. x [N, T, in] (row
 * stride in), y [N, T, D*H] gets its half, a [N, ta, S] the gates of step
 * t at t % ta (ta = T, or 2 when only the last step is needed). */
static void layer_forward(const struct rnn_dims *r, struct dl_node *n, int l,
			  int d, const float *x, int in, float *y, float *a,
			  int ta,
			  const float *h0, const float *c0,
			  const struct rnn_scratch *s)
{
	int N = r->N, T = r->T, H = r->H, GH = r->G * r->H, DH = r->D * r->H;
	const float *wih = n->params[pidx(r, 0, l, d)].data;
	const float *whh = n->params[pidx(r, 1, l, d)].data;
	const float *bih = r->bias ? n->params[pidx(r, 2, l, d)].data : NULL;
	const float *bhh = r->bias ? n->params[pidx(r, 3, l, d)].data : NULL;
	dl_sgemm(0, 1, N * T, GH, in, 1.0f, x, in, wih, in, 0.0f, s->xw, GH);
	if (bih)
		for (int64_t m = 0; m < (int64_t)N * T; m++)
			for (int j = 0; j < GH; j++)
				s->xw[m * GH + j] += bih[j];
	for (int step = 0; step < T; step++) {
		int t = d ? T - 1 - step : step, ld, ldc = 0;
		const float *hp = h_prev(r, y, h0, s->zero, l, d, t, step == 0, &ld);
		const float *cp = NULL;
		if (r->kind == KIND_LSTM) {
			if (step > 0) {
				ldc = ta * r->S;
				cp = a + (size_t)((d ? t + 1 : t - 1) % ta) * r->S + 4 * H;
			} else if (c0) {
				ldc = r->h0ld;
				cp = c0 + (size_t)(l * r->D + d) * H;
			} else {
				ldc = H;
				cp = s->zero;
			}
		}
		int gl = r->kind == KIND_GRU && !r->lbr ? 2 * H : GH;
		dl_sgemm(0, 1, N, gl, H, 1.0f, hp, ld, whh, H, 0.0f, s->rg, GH);
		if (gl < GH)
			for (int i = 0; i < N; i++)
				memset(s->rg + (size_t)i * GH + gl, 0,
				       (size_t)(GH - gl) * sizeof(float));
		if (bhh)
			for (int i = 0; i < N; i++)
				for (int j = 0; j < GH; j++)
					s->rg[(size_t)i * GH + j] += bhh[j];
		if (r->kind == KIND_GRU && !r->lbr) {
			/* rh = r * h_prev, then R_n = rh W_hn^T + b_hn */
			for (int i = 0; i < N; i++)
				for (int j = 0; j < H; j++) {
					const float *xw = s->xw + ((size_t)i * T + t) * GH;
					float rr = sigm(xw[j] + s->rg[(size_t)i * GH + j]);
					s->rh[(size_t)i * H + j] = rr * hp[(size_t)i * ld + j];
				}
			dl_sgemm(0, 1, N, H, H, 1.0f, s->rh, H,
				 whh + (size_t)2 * H * H, H, 1.0f,
				 s->rg + 2 * H, GH);
		}
#pragma omp parallel for if ((int64_t)N * GH > PAR_MIN)
		for (int i = 0; i < N; i++) {
			const float *xw = s->xw + ((size_t)i * T + t) * GH;
			const float *rg = s->rg + (size_t)i * GH;
			const float *h = hp + (size_t)i * ld;
			float *yo = y + ((size_t)i * T + t) * DH + (size_t)d * H;
			float *g = a + ((size_t)i * ta + t % ta) * r->S;
			for (int j = 0; j < H; j++) {
				if (r->kind == KIND_RNN) {
					float v = xw[j] + rg[j];
					yo[j] = r->act == ACT_RELU ? (v > 0.0f ? v : 0.0f)
						: r->act == ACT_SIGMOID ? sigm(v) : tanhf(v);
				} else if (r->kind == KIND_LSTM) {
					float ig = sigm(xw[j] + rg[j]);
					float fg = sigm(xw[H + j] + rg[H + j]);
					float gg = tanhf(xw[2 * H + j] + rg[2 * H + j]);
					float og = sigm(xw[3 * H + j] + rg[3 * H + j]);
					float c = fg * cp[(size_t)i * ldc + j] + ig * gg;
					g[j] = ig;
					g[H + j] = fg;
					g[2 * H + j] = gg;
					g[3 * H + j] = og;
					g[4 * H + j] = c;
					yo[j] = og * tanhf(c);
				} else {
					float rr = sigm(xw[j] + rg[j]);
					float z = sigm(xw[H + j] + rg[H + j]);
					float hn = rg[2 * H + j];
					float nn = tanhf(xw[2 * H + j] + (r->lbr ? rr * hn : hn));
					g[j] = rr;
					g[H + j] = z;
					g[2 * H + j] = nn;
					g[3 * H + j] = hn;
					yo[j] = (1.0f - z) * nn + z * h[j];
				}
			}
		}
	}
}

/* h_n (and c_n) of layer l, direction d into hn, cn [N, L*D, H] (cn NULL:
 * not wanted): the direction's last step, T - 1 forward, 0 backward. y, a,
 * ta as for layer_forward. */
static void take_state(const struct rnn_dims *r, int l, int d, const float *y,
		       const float *a, int ta, float *hn, float *cn)
{
	int H = r->H, t = d ? 0 : r->T - 1;
	size_t ls = (size_t)r->L * r->D * H, off = (size_t)(l * r->D + d) * H;
	for (int i = 0; i < r->N; i++) {
		memcpy(hn + i * ls + off,
		       y + ((size_t)i * r->T + t) * r->D * H + (size_t)d * H,
		       (size_t)H * sizeof(float));
		if (cn)
			memcpy(cn + i * ls + off,
			       a + ((size_t)i * ta + t % ta) * r->S + 4 * H,
			       (size_t)H * sizeof(float));
	}
}

/* Stepped: a one-way rnn over the tokens whose output is the sequence
 * keeps each sequence's last h (and c) of every layer: [L H] (then [L H]). */
static int rnn_step(struct dl_node *n, const struct dl_shape *in,
		    const int *in_axis, int *out_axis, int64_t max_len,
		    struct dl_error *err)
{
	(void)max_len;
	struct rnn_dims r;
	rnn_dims(n, &in[0], &r);
	if (in_axis[0] != 2)
		return dl_node_error(err, n, -1,
			"its input's steps are not the token positions, so the model cannot be "
			"decoded step by step");
	for (int k = 1; k < n->n_in; k++)
		if (in_axis[k])
			return dl_node_error(err, n, -1,
				"its initial state depends on the tokens, so the model cannot be "
				"decoded step by step");
	if (r.D > 1)
		return dl_node_error(err, n, HP_BIDIR,
			"it is bidirectional: its backward direction reads later tokens, so "
			"the model cannot be decoded step by step");
	if (r.last || r.state)
		return dl_node_error(err, n, HP_OUTPUT,
			"its output is its final state, not one value per token, so the model "
			"cannot be decoded step by step (give output: sequence)");
	out_axis[0] = 2;
	n->step_floats = (size_t)(r.kind == KIND_LSTM ? 2 : 1) * (size_t)r.L * r.H;
	return 0;
}

static void rnn_fwd(struct dl_node *n, const struct dl_tensor *in,
		    struct dl_tensor *out, struct dl_ctx *ctx)
{
	struct rnn_dims r;
	struct rnn_scratch s;
	rnn_dims(n, &in[0].shape, &r);
	scratch_map(&r, ctx->ws, &s);
	/* training keeps every layer's output and gates for backward */
	int keep = ctx->saved != NULL;
	char *store = keep ? ctx->saved : ctx->ws;
	const float *h0 = n->n_in > 1 ? in[1].data : NULL;
	const float *c0 = n->n_in > 2 ? in[2].data : NULL;
	int DH = r.D * r.H;
	size_t ntdh = (size_t)r.N * r.T * DH;
	int drop = r.drop && ctx->train && keep;
	/* stepped: a sequence that starts takes h0 and c0 (or zeros) into its
	 * state, and every layer starts from the state and leaves its last
	 * step there */
	float *st = NULL;
	size_t LH = (size_t)r.L * r.H;
	if (dl_stepping(n, ctx) && n->step_state) {
		st = n->step_state + (size_t)ctx->step->row0 * n->step_floats;
		for (int i = 0; i < r.N; i++) {
			if (ctx->step->pos[i] != 0)
				continue;
			float *si = st + (size_t)i * n->step_floats;
			if (h0)
				memcpy(si, h0 + (size_t)i * LH, LH * sizeof(float));
			else
				memset(si, 0, LH * sizeof(float));
			if (r.kind == KIND_LSTM && c0)
				memcpy(si + LH, c0 + (size_t)i * LH, LH * sizeof(float));
			else if (r.kind == KIND_LSTM)
				memset(si + LH, 0, LH * sizeof(float));
		}
		h0 = st;
		c0 = r.kind == KIND_LSTM ? st + LH : NULL;
		r.h0ld = (int)n->step_floats;
	}
	float scale = r.p < 1.0 ? (float)(1.0 / (1.0 - r.p)) : 0.0f;
	memset(s.zero, 0, (size_t)r.N * r.H * sizeof(float));
	const float *x = in[0].data;
	int width = r.I;
	float *y = NULL;
	for (int l = 0; l < r.L; l++) {
		float *prev = y;
		y = (float *)store + (keep ? r.y[l] : r.cy[l % 2]);
		if (l > 0) {
			x = prev;
			width = DH;
			if (drop) {
				uint8_t *m = (uint8_t *)store + r.mask +
					     (size_t)(l - 1) * ntdh;
				float *xd = (float *)store + r.xd[l];
				for (size_t k = 0; k < ntdh; k++) {
					m[k] = r.p < 1.0 && dl_rng_uniform(ctx->rng) >= r.p;
					xd[k] = m[k] ? x[k] * scale : 0.0f;
				}
				x = xd;
			}
		}
		for (int d = 0; d < r.D; d++) {
			float *a = keep ? (float *)store + r.a[l] +
				   (size_t)d * r.N * r.T * r.S
				   : (float *)store + r.ca;
			int ta = keep ? r.T : 2;
			layer_forward(&r, n, l, d, x, width, y, a, ta, h0, c0, &s);
			for (int i = 0; st && i < r.N; i++) {
				float *si = st + (size_t)i * n->step_floats + (size_t)l * r.H;
				memcpy(si, y + ((size_t)i * r.T + r.T - 1) * DH,
				       (size_t)r.H * sizeof(float));
				if (r.kind == KIND_LSTM)
					memcpy(si + LH, a + ((size_t)i * ta + (r.T - 1) % ta) * r.S + 4 * r.H,
					       (size_t)r.H * sizeof(float));
			}
			if (r.state)
				take_state(&r, l, d, y, a, ta, out[0].data,
					   r.kind == KIND_LSTM ? out[1].data : NULL);
		}
	}
	if (r.state)
		return;
	if (!r.last) {
		memcpy(out->data, y, ntdh * sizeof(float));
		return;
	}
	for (int i = 0; i < r.N; i++)
		for (int d = 0; d < r.D; d++)
			memcpy(out->data + (size_t)i * DH + (size_t)d * r.H,
			       y + ((size_t)i * r.T + (d ? 0 : r.T - 1)) * DH +
			       (size_t)d * r.H, (size_t)r.H * sizeof(float));
}

/* One layer, one direction, backward over all steps. dy [N, T, D*H] holds
 * dL/dY_l (this direction's half is read); dx [N, T, in] (NULL: not
 * needed) and the parameter gradients are added to. dh0/dc0: the initial
 * states' gradients [N, D*L, H] (NULL: not needed); dhn/dcn: those of the
 * final states (output: state; NULL: none). */
static void layer_backward(const struct rnn_dims *r, struct dl_node *n, int l,
			   int d, const float *x, int in, float *dx,
			   const float *y, const float *a, const float *dy,
			   const float *h0, const float *c0, float *dh0,
			   float *dc0, const float *dhn, const float *dcn,
			   const struct rnn_scratch *s)
{
	int N = r->N, T = r->T, H = r->H, GH = r->G * r->H, DH = r->D * r->H;
	struct dl_param *pw = &n->params[pidx(r, 0, l, d)];
	struct dl_param *ph = &n->params[pidx(r, 1, l, d)];
	float *dbih = r->bias ? n->params[pidx(r, 2, l, d)].grad : NULL;
	float *dbhh = r->bias ? n->params[pidx(r, 3, l, d)].grad : NULL;
	const float *whh = ph->data;
	float *dgi = s->xw, *dgh = s->rg;
	size_t nh = (size_t)N * H;
	memset(s->dh, 0, nh * sizeof(float));
	memset(s->dc, 0, nh * sizeof(float));
	size_t off = (size_t)(l * r->D + d) * H, ls = (size_t)r->D * r->L * H;
	for (int i = 0; i < N; i++) {
		if (dhn)
			memcpy(s->dh + (size_t)i * H, dhn + i * ls + off,
			       (size_t)H * sizeof(float));
		if (dcn)
			memcpy(s->dc + (size_t)i * H, dcn + i * ls + off,
			       (size_t)H * sizeof(float));
	}
	for (int j = 0; j < GH; j++)
		s->acc_hh[j] = 0.0;
	for (int step = T - 1; step >= 0; step--) {
		int t = d ? T - 1 - step : step, ld, ldc = 0;
		const float *hp = h_prev(r, y, h0, s->zero, l, d, t, step == 0, &ld);
		const float *cp = NULL;
		if (r->kind == KIND_LSTM) {
			if (step > 0) {
				ldc = T * r->S;
				cp = a + (size_t)(d ? t + 1 : t - 1) * r->S + 4 * H;
			} else if (c0) {
				ldc = r->h0ld;
				cp = c0 + (size_t)(l * r->D + d) * H;
			} else {
				ldc = H;
				cp = s->zero;
			}
		}
		/* dh += dY_l at t; then the gates' gradients; dh and dc become
		 * the previous step's (dh only its direct part, see below) */
#pragma omp parallel for if ((int64_t)N * GH > PAR_MIN)
		for (int i = 0; i < N; i++) {
			const float *g = a + ((size_t)i * T + t) * r->S;
			const float *yo = y + ((size_t)i * T + t) * DH + (size_t)d * H;
			const float *h = hp + (size_t)i * ld;
			float *dh = s->dh + (size_t)i * H, *dc = s->dc + (size_t)i * H;
			float *gi = dgi + ((size_t)i * T + t) * GH;
			float *gh = dgh + (size_t)i * GH;
			const float *dyo = dy + ((size_t)i * T + t) * DH + (size_t)d * H;
			for (int j = 0; j < H; j++) {
				float dhj = dh[j] + dyo[j];
				if (r->kind == KIND_RNN) {
					float v = r->act == ACT_RELU ? (yo[j] > 0.0f ? dhj : 0.0f)
						: r->act == ACT_SIGMOID ? dhj * yo[j] * (1.0f - yo[j])
						: dhj * (1.0f - yo[j] * yo[j]);
					gi[j] = gh[j] = v;
					dh[j] = 0.0f;
				} else if (r->kind == KIND_LSTM) {
					float ig = g[j], fg = g[H + j], gg = g[2 * H + j];
					float og = g[3 * H + j], c = g[4 * H + j];
					float tc = tanhf(c);
					float dcj = dc[j] + dhj * og * (1.0f - tc * tc);
					float di = dcj * gg, df = dcj * cp[(size_t)i * ldc + j];
					float dg = dcj * ig, dor = dhj * tc;
					gi[j] = gh[j] = di * ig * (1.0f - ig);
					gi[H + j] = gh[H + j] = df * fg * (1.0f - fg);
					gi[2 * H + j] = gh[2 * H + j] = dg * (1.0f - gg * gg);
					gi[3 * H + j] = gh[3 * H + j] = dor * og * (1.0f - og);
					dc[j] = dcj * fg;
					dh[j] = 0.0f;
				} else {
					float rr = g[j], z = g[H + j], nn = g[2 * H + j];
					float hn = g[3 * H + j];
					float dnp = dhj * (1.0f - z) * (1.0f - nn * nn);
					float dz = dhj * (h[j] - nn);
					gi[H + j] = gh[H + j] = dz * z * (1.0f - z);
					gi[2 * H + j] = dnp;
					if (r->lbr) {
						gh[2 * H + j] = dnp * rr;
						float drr = dnp * hn;
						gi[j] = gh[j] = drr * rr * (1.0f - rr);
					} else {
						gh[2 * H + j] = dnp;
						s->rh[(size_t)i * H + j] = rr * h[j];
					}
					dh[j] = dhj * z;
				}
			}
		}
		if (r->kind == KIND_GRU && !r->lbr) {
			/* d(r h) = dn_pre W_hn; dr = d(r h) h; dh += d(r h) r */
			dl_sgemm(0, 0, N, H, H, 1.0f, dgh + 2 * H, GH,
				 whh + (size_t)2 * H * H, H, 0.0f, s->drh, H);
			for (int i = 0; i < N; i++) {
				const float *g = a + ((size_t)i * T + t) * r->S;
				const float *h = hp + (size_t)i * ld;
				float *gi = dgi + ((size_t)i * T + t) * GH;
				float *gh = dgh + (size_t)i * GH;
				for (int j = 0; j < H; j++) {
					float rr = g[j], drh = s->drh[(size_t)i * H + j];
					gi[j] = gh[j] = drh * h[j] * rr * (1.0f - rr);
					s->dh[(size_t)i * H + j] += drh * rr;
				}
			}
			if (ph->grad) {
				dl_sgemm(1, 0, 2 * H, H, N, 1.0f, dgh, GH, hp, ld, 1.0f,
					 ph->grad, H);
				dl_sgemm(1, 0, H, H, N, 1.0f, dgh + 2 * H, GH, s->rh, H,
					 1.0f, ph->grad + (size_t)2 * H * H, H);
			}
			dl_sgemm(0, 0, N, H, 2 * H, 1.0f, dgh, GH, whh, H, 1.0f,
				 s->dh, H);
		} else {
			if (ph->grad)
				dl_sgemm(1, 0, GH, H, N, 1.0f, dgh, GH, hp, ld, 1.0f,
					 ph->grad, H);
			dl_sgemm(0, 0, N, H, GH, 1.0f, dgh, GH, whh, H, 1.0f, s->dh, H);
		}
		if (dbhh)
			for (int i = 0; i < N; i++)
				for (int j = 0; j < GH; j++)
					s->acc_hh[j] += dgh[(size_t)i * GH + j];
	}
	/* what is left in dh and dc flows into h0 and c0 */
	for (int i = 0; i < N; i++)
		for (int j = 0; j < H; j++) {
			if (dh0)
				dh0[i * ls + off + j] += s->dh[(size_t)i * H + j];
			if (dc0 && r->kind == KIND_LSTM)
				dc0[i * ls + off + j] += s->dc[(size_t)i * H + j];
		}
	if (dx)
		dl_sgemm(0, 0, N * T, in, GH, 1.0f, dgi, GH, pw->data, in, 1.0f,
			 dx, in);
	if (pw->grad)
		dl_sgemm(1, 0, GH, in, N * T, 1.0f, dgi, GH, x, in, 1.0f,
			 pw->grad, in);
	if (dbih) {
		for (int j = 0; j < GH; j++)
			s->acc_ih[j] = 0.0;
		for (int64_t m = 0; m < (int64_t)N * T; m++)
			for (int j = 0; j < GH; j++)
				s->acc_ih[j] += dgi[m * GH + j];
		for (int j = 0; j < GH; j++)
			dbih[j] += (float)s->acc_ih[j];
	}
	if (dbhh)
		for (int j = 0; j < GH; j++)
			dbhh[j] += (float)s->acc_hh[j];
}

static void rnn_bwd(struct dl_node *n, const struct dl_tensor *in,
		    const struct dl_tensor *out, const float *dout,
		    float *const *din, struct dl_ctx *ctx)
{
	struct rnn_dims r;
	struct rnn_scratch s;
	rnn_dims(n, &in[0].shape, &r);
	scratch_map(&r, ctx->ws, &s);
	/* backward follows a training forward, which kept its layers'
	 * outputs and gates in ctx->saved */
	char *store = ctx->saved;
	const float *h0 = n->n_in > 1 ? in[1].data : NULL;
	const float *c0 = n->n_in > 2 ? in[2].data : NULL;
	int DH = r.D * r.H;
	size_t ntdh = (size_t)r.N * r.T * DH;
	int drop = r.drop && ctx->train;
	float scale = r.p < 1.0 ? (float)(1.0 / (1.0 - r.p)) : 0.0f;
	memset(s.zero, 0, (size_t)r.N * r.H * sizeof(float));
	float *dy = s.dya, *dprev = s.dyb;
	const float *dhn = r.state ? dout : NULL;
	const float *dcn = r.state && r.kind == KIND_LSTM ? ctx->dout[1] : NULL;
	if (r.state) {
		memset(dy, 0, ntdh * sizeof(float));
	} else if (!r.last) {
		memcpy(dy, dout, ntdh * sizeof(float));
	} else {
		memset(dy, 0, ntdh * sizeof(float));
		for (int i = 0; i < r.N; i++)
			for (int d = 0; d < r.D; d++)
				memcpy(dy + ((size_t)i * r.T + (d ? 0 : r.T - 1)) * DH +
				       (size_t)d * r.H,
				       dout + (size_t)i * DH + (size_t)d * r.H,
				       (size_t)r.H * sizeof(float));
	}
	for (int l = r.L - 1; l >= 0; l--) {
		const float *x = in[0].data;
		int width = r.I;
		float *dx = din[0];
		if (l > 0) {
			x = (float *)store + (drop ? r.xd[l] : r.y[l - 1]);
			width = DH;
			dx = drop ? s.dx : dprev;
			memset(dx, 0, ntdh * sizeof(float));
		}
		for (int d = 0; d < r.D; d++)
			layer_backward(&r, n, l, d, x, width, dx,
				       (float *)store + r.y[l],
				       (float *)store + r.a[l] +
				       (size_t)d * r.N * r.T * r.S,
				       dy, h0, c0, n->n_in > 1 ? din[1] : NULL,
				       n->n_in > 2 ? din[2] : NULL, dhn, dcn, &s);
		if (l > 0) {
			if (drop) {
				const uint8_t *m = (uint8_t *)store + r.mask +
						   (size_t)(l - 1) * ntdh;
				for (size_t k = 0; k < ntdh; k++)
					dprev[k] = m[k] ? s.dx[k] * scale : 0.0f;
			}
			float *t = dy;
			dy = dprev;
			dprev = t;
		}
	}
}

#define RNN_PARAMS(G) \
	"weight_ih_l{k}[_reverse] [" G "hidden_size, input_size (layer 0) or " \
	"D*hidden_size], weight_hh_l{k}[_reverse] [" G "hidden_size, " \
	"hidden_size], bias_ih_l{k}[_reverse] [" G "hidden_size], " \
	"bias_hh_l{k}[_reverse] [" G "hidden_size]"

/* h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or relu, or
 * sigmoid: not in PyTorch);
 * all weights and biases ~ U(+-1/sqrt(hidden_size)) (PyTorch's nn.RNN) */
static const struct dl_op_desc op_rnn = {
	.name = "rnn",
	.doc = "h_t = tanh(W_ih x_t + b_ih + W_hh h_(t-1) + b_hh) (or relu, sigmoid)",
	.min_in = 1, .max_in = 2,
	.hp = rnn_hp, .n_hp = 9,
	.infer = rnn_infer,
	.forward = rnn_fwd,
	.backward = rnn_bwd,
	.step = rnn_step,
	.flags = DL_OP_COMPLEX | DL_OP_BWD_NO_OUTPUT,
	.params = RNN_PARAMS(""),
};

/* i, f, g, o = sigma, sigma, tanh, sigma(W_i* x_t + b_i* + W_h* h + b_h*);
 * c_t = f c_(t-1) + i g; h_t = o tanh(c_t) (PyTorch's nn.LSTM) */
/* lstm's output: state is h_n and c_n */
static int lstm_n_outputs(const struct dl_node *n)
{
	return n->hp[HP_OUTPUT].i == OUT_STATE ? 2 : 1;
}

static const struct dl_op_desc op_lstm = {
	.name = "lstm",
	.doc = "c_t = f * c_(t-1) + i * g, h_t = o * tanh(c_t); gates i, f, g, o",
	.min_in = 1, .max_in = 3,
	.hp = lstm_hp, .n_hp = 8,
	.infer = rnn_infer,
	.forward = rnn_fwd,
	.backward = rnn_bwd,
	.step = rnn_step,
	.flags = DL_OP_COMPLEX | DL_OP_BWD_NO_OUTPUT,
	.params = RNN_PARAMS("4*"),
	.n_outputs = lstm_n_outputs,
};

/* r, z = sigma(W_i* x_t + b_i* + W_h* h + b_h*);
 * n = tanh(W_in x_t + b_in + r (W_hn h + b_hn)); h_t = (1 - z) n + z h
 * (PyTorch's nn.GRU); linear_before_reset false: n = tanh(W_in x_t + b_in
 * + W_hn (r h) + b_hn) (ONNX, Keras) */
static const struct dl_op_desc op_gru = {
	.name = "gru",
	.doc = "n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h_t = (1 - z) * n + z * h; gates r, z, n",
	.min_in = 1, .max_in = 2,
	.hp = gru_hp, .n_hp = 9,
	.infer = rnn_infer,
	.forward = rnn_fwd,
	.backward = rnn_bwd,
	.step = rnn_step,
	.flags = DL_OP_COMPLEX | DL_OP_BWD_NO_OUTPUT,
	.params = RNN_PARAMS("3*"),
};

const struct dl_op_desc *const dl_ops_rnn[] = {&op_rnn, &op_lstm, &op_gru, NULL};
