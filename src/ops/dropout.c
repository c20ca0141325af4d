/* Dropout: the identity at inference; in training each element (dropout),
 * each channel of [N, C, ...] (dropout2d) or each whole sample (drop_path,
 * stochastic depth) is zeroed with probability p and the survivors scaled
 * by 1 / (1 - p). The mask is drawn from ctx->rng
 * in element order, so a seed gives the same masks on every machine, and
 * kept in ctx->saved (one byte per element or channel) for backward.
 * p = 0 is the identity in training too, with no draws and no mask, as
 * PyTorch's at::dropout returns its input when p == 0: the generator's
 * stream then continues as if the op were not there.
 * macs: 0. */
#include <stdint.h>
#include <string.h>

#include "engine/op.h"
#include "engine/stepper.h"

#define PAR_MIN 32768 /* elements below which a loop stays serial */

/* mask[G] (1 = kept) from rng; out[G, S] = inp * mask * scale, where G
 * groups of S elements share one draw (S = 1 for dropout). */
static void dropout_forward(float *out, uint8_t *mask, const float *inp,
			    struct dl_rng *rng, double p, int64_t G, int64_t S)
{
	float scale = p < 1.0 ? (float)(1.0 / (1.0 - p)) : 0.0f;
	for (int64_t g = 0; g < G; g++)
		mask[g] = p < 1.0 && dl_rng_uniform(rng) >= p;
#pragma omp parallel for if (G * S > PAR_MIN)
	for (int64_t g = 0; g < G; g++) {
		for (int64_t j = 0; j < S; j++)
			out[g * S + j] = mask[g] ? inp[g * S + j] * scale : 0.0f;
	}
}

static void dropout_backward(float *dinp, const float *dout,
			     const uint8_t *mask, double p, int64_t G,
			     int64_t S)
{
	float scale = p < 1.0 ? (float)(1.0 / (1.0 - p)) : 0.0f;
#pragma omp parallel for if (G * S > PAR_MIN)
	for (int64_t g = 0; g < G; g++) {
		if (!mask[g])
			continue;
		for (int64_t j = 0; j < S; j++)
			dinp[g * S + j] += dout[g * S + j] * scale;
	}
}

static const struct dl_op_desc op_dropout2d, op_drop_path;

/* groups that share a draw, and their size */
static void dropout_groups(const struct dl_node *n, const struct dl_shape *x,
			   int64_t *G, int64_t *S)
{
	int split = n->op == &op_dropout2d ? 2 : n->op == &op_drop_path ? 1 : x->ndim;
	*G = dl_shape_prod(x, 0, split);
	*S = dl_shape_prod(x, split, x->ndim);
}

static int dropout_infer(struct dl_node *n, const struct dl_shape *in,
			 struct dl_shape *out, struct dl_error *err)
{
	char s[128];
	double p = n->hp[0].f;
	if (!(p >= 0.0 && p <= 1.0))
		return dl_node_error(err, n, 0,
			"p is %g; a probability is between 0 and 1", p);
	if (n->op == &op_dropout2d && in[0].ndim < 2)
		return dl_node_error(err, n, -1,
			"the input %s has no channels; dropout2d zeroes whole channels of [N, C, ...]",
			dl_shape_str(&in[0], s, sizeof s));
	int64_t G, S;
	dropout_groups(n, &in[0], &G, &S);
	*out = in[0];
	n->ws_bytes = 0;
	n->saved_bytes = p > 0 ? (size_t)G : 0;   /* p = 0: no mask */
	n->macs = 0;
	return 0;
}

static void dropout_fwd(struct dl_node *n, const struct dl_tensor *in,
			struct dl_tensor *out, struct dl_ctx *ctx)
{
	int64_t G, S;
	dropout_groups(n, &in[0].shape, &G, &S);
	if (!ctx->train || !ctx->saved || n->hp[0].f == 0.0) {
		if (out->data != in[0].data && G * S > 0)
			memcpy(out->data, in[0].data, (size_t)(G * S) * sizeof(float));
		return;
	}
	/* data-parallel: the draws of the samples of the other processes'
	 * shards are skipped, so each sample gets the mask of one process */
	const struct dl_shard *sh = ctx->shard;
	int64_t N = in[0].shape.d[0], per = 0, S1;
	struct dl_shape one = in[0].shape;
	one.d[0] = 1;
	dropout_groups(n, &one, &per, &S1);
	if (sh)
		dl_shard_rng_skip(sh, ctx->rng, sh->off, per);
	dropout_forward(out->data, ctx->saved, in[0].data, ctx->rng, n->hp[0].f,
			G, S);
	if (sh)
		dl_shard_rng_skip(sh, ctx->rng, sh->total - sh->off - N, per);
}

static void dropout_bwd(struct dl_node *n, const struct dl_tensor *in,
			const struct dl_tensor *out, const float *dout,
			float *const *din, struct dl_ctx *ctx)
{
	int64_t G, S;
	if (!din[0])
		return;
	dropout_groups(n, &in[0].shape, &G, &S);
	if (!ctx->train || !ctx->saved || n->hp[0].f == 0.0) {
		float *dx = din[0];
		int64_t len = G * S;
#pragma omp parallel for if (len > PAR_MIN)
		for (int64_t i = 0; i < len; i++)
			dx[i] += dout[i];
		return;
	}
	dropout_backward(din[0], dout, ctx->saved, n->hp[0].f, G, S);
}

static const struct dl_hp_desc dropout_hp[] = {
	{"p", DL_HP_FLOAT, "0.5", NULL, DL_HP_NONNEG},
};

/* training: y = x m / (1 - p), m ~ Bernoulli(1 - p) per element;
 * inference: y = x */
static const struct dl_op_desc op_dropout = {
	.name = "dropout", .doc = "y = x m / (1 - p), m ~ Bernoulli(1 - p) (training)",
	.min_in = 1, .max_in = 1, .hp = dropout_hp, .n_hp = 1,
	.infer = dropout_infer, .forward = dropout_fwd, .backward = dropout_bwd,
	.step = dl_step_pointwise, .fuse = DL_FUSE_IDENTITY,
	.flags = DL_OP_INPLACE_OK | DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

/* training: y[n, c] = x[n, c] m[n, c] / (1 - p), one draw per channel;
 * inference: y = x */
static const struct dl_op_desc op_dropout2d = {
	.name = "dropout2d", .doc = "y[n, c] = x[n, c] m[n, c] / (1 - p) (training)",
	.min_in = 1, .max_in = 1, .hp = dropout_hp, .n_hp = 1,
	.infer = dropout_infer, .forward = dropout_fwd, .backward = dropout_bwd,
	.step = dl_step_pointwise, .fuse = DL_FUSE_IDENTITY,
	.flags = DL_OP_INPLACE_OK | DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

/* training: y[n] = x[n] m[n] / (1 - p), one draw per sample (stochastic
 * depth, as timm's DropPath and torchvision's StochasticDepth in "row"
 * mode); inference: y = x */
static const struct dl_op_desc op_drop_path = {
	.name = "drop_path", .doc = "y[n] = x[n] m[n] / (1 - p), one draw per sample (training)",
	.min_in = 1, .max_in = 1, .hp = dropout_hp, .n_hp = 1,
	.infer = dropout_infer, .forward = dropout_fwd, .backward = dropout_bwd,
	.step = dl_step_pointwise, .fuse = DL_FUSE_IDENTITY,
	.flags = DL_OP_INPLACE_OK | DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

const struct dl_op_desc *const dl_ops_dropout[] = {
	&op_dropout, &op_dropout2d, &op_drop_path, NULL,
};
