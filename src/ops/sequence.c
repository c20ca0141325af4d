/* Sequence inputs: embedding (token ids -> vectors, as nn.Embedding) and
 * positional_encoding (sinusoidal or learned positions added to [N, T, D],
 * or appended to it as more channels).
 * Ids arrive as float32 values holding integers (`dtype: int` inputs). */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "engine/op.h"
#include "engine/stepper.h"

#define PAR_MIN 32768 /* elements below which a loop stays serial */

/* ---- embedding ---- */

enum { EMB_NUM, EMB_DIM, EMB_PAD, N_EMB_HP };

static const struct dl_hp_desc emb_hp[N_EMB_HP] = {
	[EMB_NUM] = {"num_embeddings", DL_HP_INT, NULL, NULL,
		     DL_HP_REQUIRED | DL_HP_POSITIVE},
	[EMB_DIM] = {"embedding_dim", DL_HP_INT, NULL, NULL,
		     DL_HP_REQUIRED | DL_HP_POSITIVE},
	[EMB_PAD] = {"padding_idx", DL_HP_INT, NULL, NULL, 0},
};

/* The row of id v, or -1 when v is not an integer in [0, num): such ids
 * look up a zero vector and get no gradient (the forward cannot fail). */
static int64_t emb_row(float v, int64_t num)
{
	if (!(v >= 0.0f && v < (float)num) || v != floorf(v))
		return -1;
	return (int64_t)v;
}

/* padding_idx as a row (PyTorch's negative counts from the end), or -1 */
static int64_t emb_pad(const struct dl_node *n)
{
	if (!n->hp[EMB_PAD].set)
		return -1;
	int64_t p = n->hp[EMB_PAD].i;
	return p < 0 ? p + n->hp[EMB_NUM].i : p;
}

/* out[M, D] = weight[ids[m]] (zeros for an id out of range) */
static void embedding_forward(float *out, const float *ids,
			      const float *weight, int64_t M, int64_t num,
			      int64_t D)
{
#pragma omp parallel for if (M * D > PAR_MIN)
	for (int64_t m = 0; m < M; m++) {
		int64_t r = emb_row(ids[m], num);
		float *o = out + m * D;
		if (r < 0)
			memset(o, 0, (size_t)D * sizeof *o);
		else
			memcpy(o, weight + r * D, (size_t)D * sizeof *o);
	}
}

/* dweight[ids[m]] += dout[m], except the padding row and bad ids; serial,
 * since ids repeat */
static void embedding_backward(float *dweight, const float *dout,
			       const float *ids, int64_t M, int64_t num,
			       int64_t D, int64_t pad)
{
	for (int64_t m = 0; m < M; m++) {
		int64_t r = emb_row(ids[m], num);
		if (r < 0 || r == pad)
			continue;
		float *w = dweight + r * D;
		const float *g = dout + m * D;
		for (int64_t j = 0; j < D; j++)
			w[j] += g[j];
	}
}

static int emb_infer(struct dl_node *n, const struct dl_shape *in,
		     struct dl_shape *out, struct dl_error *err)
{
	char s[128];
	const struct dl_shape *x = &in[0];
	int64_t num = n->hp[EMB_NUM].i, D = n->hp[EMB_DIM].i;
	if (n->hp[EMB_PAD].set) {
		int64_t p = n->hp[EMB_PAD].i;
		if (p < -num || p >= num)
			return dl_node_error(err, n, EMB_PAD,
				"padding_idx is %lld; it must be within [-%lld, %lld) (num_embeddings)",
				(long long)p, (long long)num, (long long)num);
	}
	if (x->ndim < 1 || x->ndim >= DL_MAX_DIMS)
		return dl_node_error(err, n, -1,
			"the input has shape %s; embedding needs ids [N, ...] of at most %d dimensions",
			dl_shape_str(x, s, sizeof s), DL_MAX_DIMS - 1);
	int64_t M = dl_shape_numel(x);
	if (M < 0 || (double)M * (double)D > (double)DL_MAX_NUMEL ||
	    (double)num * (double)D > (double)DL_MAX_NUMEL)
		return dl_node_error(err, n, -1, "the input %s is too large",
				     dl_shape_str(x, s, sizeof s));
	int64_t wd[2] = {num, D};
	struct dl_shape ws = dl_shape_make(2, wd);
	int rc = dl_node_param(n, "weight", &ws, DL_INIT_NORMAL, 1.0, err);
	if (rc < 0)
		return rc;
	n->params[rc].init_zero_row = emb_pad(n);  /* as nn.Embedding's init */
	*out = *x;
	out->d[out->ndim++] = D;
	n->ws_bytes = 0;
	n->saved_bytes = 0;
	n->macs = 0;
	return 0;
}

static void emb_fwd(struct dl_node *n, const struct dl_tensor *in,
		    struct dl_tensor *out, struct dl_ctx *ctx)
{
	embedding_forward(out->data, in[0].data, n->params[0].data,
			  dl_shape_numel(&in[0].shape), n->hp[EMB_NUM].i,
			  n->hp[EMB_DIM].i);
}

/* the ids get no gradient (din[0] is left alone) */
static void emb_bwd(struct dl_node *n, const struct dl_tensor *in,
		    const struct dl_tensor *out, const float *dout,
		    float *const *din, struct dl_ctx *ctx)
{
	if (!n->params[0].grad)
		return;
	embedding_backward(n->params[0].grad, dout, in[0].data,
			   dl_shape_numel(&in[0].shape), n->hp[EMB_NUM].i,
			   n->hp[EMB_DIM].i, emb_pad(n));
}

/* Position by position: the output's token axis is the ids' one, counted
 * from the end past the new vector dimension. */
static int emb_step(struct dl_node *n, const struct dl_shape *in,
		    const int *in_axis, int *out_axis, int64_t max_len,
		    struct dl_error *err)
{
	(void)in;
	(void)max_len;
	(void)err;
	out_axis[0] = in_axis[0] + 1;
	n->step_floats = 0;
	return 0;
}

/* y[..., :] = weight[id]: nn.Embedding; weight [num_embeddings,
 * embedding_dim] ~ N(0, 1); ids out of range give zeros, the padding_idx
 * row gets no gradient */
static const struct dl_op_desc op_embedding = {
	.name = "embedding",
	.doc = "y = weight[id]: one vector per integer id",
	.min_in = 1, .max_in = 1,
	.hp = emb_hp, .n_hp = N_EMB_HP,
	.infer = emb_infer,
	.forward = emb_fwd,
	.backward = emb_bwd,
	.params = "weight [num_embeddings, embedding_dim]",
	.flags = DL_OP_BWD_NO_OUTPUT | DL_OP_IDS,
	.step = emb_step,
};

/* ---- positional encoding ---- */

enum { PE_KIND, PE_MAX, PE_BASE, PE_MODE, PE_DIM, N_PE_HP };
enum { PE_SINUSOIDAL, PE_LEARNED };
enum { PE_ADD, PE_CONCAT };

static const struct dl_hp_desc pe_hp[N_PE_HP] = {
	[PE_KIND] = {"kind", DL_HP_ENUM, "sinusoidal", "sinusoidal|learned", 0},
	[PE_MAX] = {"max_len", DL_HP_INT, NULL, NULL, DL_HP_POSITIVE},
	[PE_BASE] = {"base", DL_HP_FLOAT, "10000", NULL, DL_HP_POSITIVE},
	[PE_MODE] = {"mode", DL_HP_ENUM, "add", "add|concat", 0},
	/* the encoding's channels E; default the input's D */
	[PE_DIM] = {"dim", DL_HP_INT, "inferred", NULL,
		    DL_HP_DERIVED | DL_HP_POSITIVE},
};

/* pe[T, D]: sin(t / base^(d/D)) on even d, cos(t / base^((d-1)/D)) on odd
 * d, in double */
static void sinusoid_table(float *pe, int64_t T, int64_t D, double base)
{
	for (int64_t d = 0; d < D; d++) {
		double inv = pow(base, -(double)(d - d % 2) / (double)D);
		for (int64_t t = 0; t < T; t++) {
			double a = (double)t * inv;
			pe[t * D + d] = (float)(d % 2 ? cos(a) : sin(a));
		}
	}
}

/* out[N, T, D] = inp + pe[T, D]; out may be inp */
static void posenc_forward(float *out, const float *inp, const float *pe,
			   int64_t N, int64_t T, int64_t D)
{
	int64_t S = T * D;
#pragma omp parallel for if (N * S > PAR_MIN)
	for (int64_t b = 0; b < N; b++)
		for (int64_t j = 0; j < S; j++)
			out[b * S + j] = inp[b * S + j] + pe[j];
}

/* dinp += dout; dpe[T, D] += sum over the batch of dout */
static void posenc_backward(float *dinp, float *dpe, const float *dout,
			    int64_t N, int64_t T, int64_t D)
{
	int64_t S = T * D;
	if (dinp)
		for (int64_t j = 0; j < N * S; j++)
			dinp[j] += dout[j];
	if (dpe)
		for (int64_t b = 0; b < N; b++)
			for (int64_t j = 0; j < S; j++)
				dpe[j] += dout[b * S + j];
}

/* out[N, T, D + E] = [inp[N, T, D], pe[T, E]] along the last dimension */
static void posenc_concat_forward(float *out, const float *inp,
				  const float *pe, int64_t N, int64_t T,
				  int64_t D, int64_t E)
{
	int64_t C = D + E;
#pragma omp parallel for if (N * T * C > PAR_MIN)
	for (int64_t r = 0; r < N * T; r++) {
		float *o = out + r * C;
		memcpy(o, inp + r * D, (size_t)D * sizeof *o);
		memcpy(o + D, pe + r % T * E, (size_t)E * sizeof *o);
	}
}

/* dinp[N, T, D] += dout[..., :D]; dpe[T, E] += sum over the batch of
 * dout[..., D:] */
static void posenc_concat_backward(float *dinp, float *dpe, const float *dout,
				   int64_t N, int64_t T, int64_t D, int64_t E)
{
	int64_t C = D + E;
	for (int64_t r = 0; r < N * T; r++) {
		const float *g = dout + r * C;
		if (dinp)
			for (int64_t j = 0; j < D; j++)
				dinp[r * D + j] += g[j];
		if (dpe)
			for (int64_t j = 0; j < E; j++)
				dpe[r % T * E + j] += g[D + j];
	}
}

/* the encoding's number of channels: dim, or the input's D */
static int64_t pe_channels(const struct dl_node *n, int64_t D)
{
	return n->hp[PE_DIM].set ? n->hp[PE_DIM].i : D;
}

static int pe_infer(struct dl_node *n, const struct dl_shape *in,
		    struct dl_shape *out, struct dl_error *err)
{
	char s[128];
	const struct dl_shape *x = &in[0];
	int learned = n->hp[PE_KIND].i == PE_LEARNED;
	if (learned && !n->hp[PE_MAX].set)
		return dl_node_error(err, n, PE_KIND,
			"kind: learned needs max_len (the number of learned positions)");
	if (x->ndim != 3)
		return dl_node_error(err, n, -1,
			"the input has shape %s; positional_encoding needs a sequence [N, T, D]",
			dl_shape_str(x, s, sizeof s));
	int64_t T = x->d[1], D = x->d[2], E = pe_channels(n, D);
	int concat = n->hp[PE_MODE].i == PE_CONCAT;
	if (!concat && E != D)
		return dl_node_error(err, n, PE_DIM,
			"dim is %lld but the input %s has %lld channels; mode: add needs them equal "
			"(mode: concat appends dim channels)",
			(long long)E, dl_shape_str(x, s, sizeof s), (long long)D);
	if ((double)T * (double)(D + E) * (double)(x->d[0] > 1 ? x->d[0] : 1) >
	    (double)DL_MAX_NUMEL)
		return dl_node_error(err, n, -1, "the input %s is too large",
				     dl_shape_str(x, s, sizeof s));
	if (n->hp[PE_MAX].set && T > n->hp[PE_MAX].i)
		return dl_node_error(err, n, PE_MAX,
			"the input %s has %lld positions but max_len is %lld",
			dl_shape_str(x, s, sizeof s), (long long)T,
			(long long)n->hp[PE_MAX].i);
	if (learned) {
		int64_t wd[2] = {n->hp[PE_MAX].i, E};
		struct dl_shape ws = dl_shape_make(2, wd);
		if ((double)wd[0] * (double)E > (double)DL_MAX_NUMEL)
			return dl_node_error(err, n, PE_MAX, "max_len is too large");
		int rc = dl_node_param(n, "weight", &ws, DL_INIT_NORMAL, 1.0, err);
		if (rc < 0)
			return rc;
		n->ws_bytes = 0;
	} else {
		n->ws_bytes = (size_t)(T * E) * sizeof(float);
	}
	*out = *x;
	out->d[2] = concat ? D + E : D;
	n->saved_bytes = 0;
	n->macs = 0;
	return 0;
}

/* A stepped call: sequence i's new positions start at pos[i], so each
 * sample adds the rows of the table from there (the table, max_len rows
 * when learned; sinusoidal rows are computed for the call's positions). */
static void pe_fwd_step(struct dl_node *n, const struct dl_tensor *in,
			struct dl_tensor *out, struct dl_ctx *ctx)
{
	const struct dl_shape *x = &in[0].shape;
	int64_t N = x->d[0], T = x->d[1], D = x->d[2], E = pe_channels(n, D);
	int learned = n->hp[PE_KIND].i == PE_LEARNED;
	int concat = n->hp[PE_MODE].i == PE_CONCAT;
	for (int64_t b = 0; b < N; b++) {
		int64_t p0 = ctx->step->pos[b];
		const float *pe;
		if (learned) {
			pe = n->params[0].data + p0 * E;
		} else {
			/* rows p0 .. p0 + T - 1 of the table, as sinusoid_table */
			float *t = ctx->ws;
			for (int64_t d = 0; d < E; d++) {
				double inv = pow(n->hp[PE_BASE].f, -(double)(d - d % 2) / (double)E);
				for (int64_t r = 0; r < T; r++) {
					double a = (double)(p0 + r) * inv;
					t[r * E + d] = (float)(d % 2 ? cos(a) : sin(a));
				}
			}
			pe = t;
		}
		if (concat)
			posenc_concat_forward(out->data + b * T * (D + E), in[0].data + b * T * D,
					      pe, 1, T, D, E);
		else
			posenc_forward(out->data + b * T * D, in[0].data + b * T * D, pe, 1, T, D);
	}
}

/* Positions continue at each sequence's offset; a learned table (or a
 * given max_len) bounds how far. */
static int pe_step(struct dl_node *n, const struct dl_shape *in,
		   const int *in_axis, int *out_axis, int64_t max_len,
		   struct dl_error *err)
{
	(void)in;
	if (in_axis[0] != 2)
		return dl_node_error(err, n, -1,
			"its input's positions are not the token positions, so the model "
			"cannot be decoded step by step");
	if (n->hp[PE_MAX].set && max_len > n->hp[PE_MAX].i)
		return dl_node_error(err, n, PE_MAX,
			"decoding keeps %lld positions but max_len is %lld (give a context "
			"of at most max_len)", (long long)max_len,
			(long long)n->hp[PE_MAX].i);
	out_axis[0] = 2;
	n->step_floats = 0;
	return 0;
}

static void pe_fwd(struct dl_node *n, const struct dl_tensor *in,
		   struct dl_tensor *out, struct dl_ctx *ctx)
{
	if (dl_stepping(n, ctx)) {
		pe_fwd_step(n, in, out, ctx);
		return;
	}
	const struct dl_shape *x = &in[0].shape;
	int64_t N = x->d[0], T = x->d[1], D = x->d[2], E = pe_channels(n, D);
	const float *pe;
	if (n->hp[PE_KIND].i == PE_LEARNED) {
		pe = n->params[0].data; /* rows past T are not used */
	} else {
		sinusoid_table(ctx->ws, T, E, n->hp[PE_BASE].f);
		pe = ctx->ws;
	}
	if (n->hp[PE_MODE].i == PE_CONCAT)
		posenc_concat_forward(out->data, in[0].data, pe, N, T, D, E);
	else
		posenc_forward(out->data, in[0].data, pe, N, T, D);
}

static void pe_bwd(struct dl_node *n, const struct dl_tensor *in,
		   const struct dl_tensor *out, const float *dout,
		   float *const *din, struct dl_ctx *ctx)
{
	const struct dl_shape *x = &in[0].shape;
	float *dpe = n->hp[PE_KIND].i == PE_LEARNED ? n->params[0].grad : NULL;
	if (n->hp[PE_MODE].i == PE_CONCAT)
		posenc_concat_backward(din[0], dpe, dout, x->d[0], x->d[1], x->d[2],
				       pe_channels(n, x->d[2]));
	else
		posenc_backward(din[0], dpe, dout, x->d[0], x->d[1], x->d[2]);
}

/* mode add: y[n, t, d] = x[n, t, d] + pe[t, d]; mode concat: y[n, t] =
 * [x[n, t], pe[t]] with E = dim channels of encoding (default D).
 * Sinusoidal pe = sin(t / base^(e/E)) (e even), cos(t / base^((e-1)/E))
 * (e odd); learned pe = weight [max_len, E] ~ N(0, 1) */
static const struct dl_op_desc op_positional_encoding = {
	.name = "positional_encoding",
	.doc = "y = x + pe[t] (or [x, pe[t]] with mode: concat), sinusoidal or learned, over [N, T, D]",
	.min_in = 1, .max_in = 1,
	.hp = pe_hp, .n_hp = N_PE_HP,
	.infer = pe_infer,
	.forward = pe_fwd,
	.backward = pe_bwd,
	.params = "weight [max_len, dim] (kind: learned; dim defaults to D)",
	/* not DL_OP_INPLACE_OK: with mode: concat the output is larger */
	.flags = DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
	.step = pe_step,
};

const struct dl_op_desc *const dl_ops_sequence[] = {
	&op_embedding, &op_positional_encoding, NULL,
};
