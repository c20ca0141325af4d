/* Normalisation: batch_norm1d, batch_norm2d, batch_norm3d (batch
 * statistics in training, running statistics in evaluation, PyTorch's
 * momentum update),
 * layer_norm over trailing dimensions, and group_norm, instance_norm1d,
 * instance_norm2d (statistics per sample and group of channels).
 * Statistics are accumulated in double; forward saves mean and 1/std for
 * backward when training. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/op.h"
#include "engine/stepper.h"
#include "ops/spatial.h"

#ifdef _OPENMP
#include <omp.h>
#endif



#define PAR_MIN 16384

static float *param_data(const struct dl_node *n, const char *name)
{
	int i = dl_node_find_param(n, name);
	return i < 0 ? NULL : n->params[i].data;
}

static float *param_grad(const struct dl_node *n, const char *name)
{
	int i = dl_node_find_param(n, name);
	return i < 0 ? NULL : n->params[i].grad;
}

/* ---- batch norm ---- */

enum { HB_NUM, HB_EPS, HB_MOMENTUM, HB_AFFINE, HB_TRACK, N_BN_HP };

static const struct dl_hp_desc bn_hp[N_BN_HP] = {
	{"num_features", DL_HP_INT, "inferred", NULL, DL_HP_DERIVED | DL_HP_POSITIVE},
	{"eps", DL_HP_FLOAT, "1e-5", NULL, DL_HP_NONNEG},
	{"momentum", DL_HP_FLOAT, "0.1", NULL, DL_HP_NONNEG},
	{"affine", DL_HP_BOOL, "true", NULL, 0},
	{"track_running_stats", DL_HP_BOOL, "true", NULL, 0},
};

/* Input [N, C, S...] seen as [N, C, S] with S the product of the rest. */
static int bn_shape(const struct dl_node *n, const struct dl_shape *in,
		    int64_t *N, int64_t *C, int64_t *S, struct dl_error *err)
{
	char a[64];
	int two_d = strcmp(n->op->name, "batch_norm2d") == 0;
	int three_d = strcmp(n->op->name, "batch_norm3d") == 0;
	if (two_d ? in->ndim != 4 : three_d ? in->ndim != 5 : in->ndim != 2 && in->ndim != 3)
		return dl_node_error(err, n, -1, "expects a %s input, got %s",
				     two_d ? "[N, C, H, W]" : three_d ? "[N, C, D, H, W]"
				     : "[N, C] or [N, C, L]",
				     dl_shape_str(in, a, sizeof a));
	*N = in->d[0];
	*C = in->d[1];
	*S = dl_shape_prod(in, 2, in->ndim);
	if (*C == 0)
		return dl_node_error(err, n, -1, "expects at least one channel, got %s",
				     dl_shape_str(in, a, sizeof a));
	if (n->hp[HB_NUM].set && n->hp[HB_NUM].i != *C)
		return dl_node_error(err, n, HB_NUM,
			"num_features %lld does not match the input's %lld channels (input %s)",
			(long long)n->hp[HB_NUM].i, (long long)*C, dl_shape_str(in, a, sizeof a));
	return 0;
}

static int bn_infer(struct dl_node *n, const struct dl_shape *in,
		    struct dl_shape *out, struct dl_error *err)
{
	int64_t N, C, S;
	int rc = bn_shape(n, &in[0], &N, &C, &S, err);
	if (rc)
		return rc;
	struct dl_shape cs = dl_shape_make(1, &C);
	if (n->hp[HB_AFFINE].i) {
		if ((rc = dl_node_param(n, "weight", &cs, DL_INIT_ONES, 0, err)) < 0 ||
		    (rc = dl_node_param(n, "bias", &cs, DL_INIT_ZEROS, 0, err)) < 0)
			return rc;
	}
	if (n->hp[HB_TRACK].i) {
		if ((rc = dl_node_buffer(n, "running_mean", &cs, DL_INIT_ZEROS, 0, err)) < 0 ||
		    (rc = dl_node_buffer(n, "running_var", &cs, DL_INIT_ONES, 0, err)) < 0)
			return rc;
	}
	*out = in[0];
	n->saved_bytes = (size_t)(2 * C) * sizeof(float);   /* mean, rstd */
	/* the same when nothing was saved; with --sync-batch-norm the sums
	 * the processes all-reduce, 2 C + 1 doubles */
	n->ws_bytes = (size_t)(2 * C + 1) * sizeof(double);
	n->macs = 2 * N * C * S;
	return 0;
}

/* The per-channel sums of batch norm are one kernel each, called by the
 * one-process path and by --sync-batch-norm alike, so that a process
 * holding part of the batch sums each image as one process does. They run
 * in BN_LANES double accumulators, element q of an image into lane
 * q % BN_LANES (the elements after an image's last whole block into one
 * scalar sum), added in order at the end: the same order for every clone,
 * so the results do not depend on the machine's vector width. (bn_backward
 * summed dy per image in float, in 4, 8 or 16 lanes by clone, while the
 * sync path summed every element in double.) */
#define BN_LANES 8

/* Channel c of x [N, C, S]: *s = sum x, *ss = sum x^2, every value and
 * square exact in double. */
DL_CLONES static void bn_channel_sums(const float *x, int64_t N, int64_t C, int64_t S,
				      int64_t c, double *s, double *ss)
{
	double a[BN_LANES] = {0}, b[BN_LANES] = {0}, ta = 0.0, tb = 0.0;
	int64_t body = S - S % BN_LANES;
	for (int64_t nn = 0; nn < N; nn++) {
		const float *xr = x + (nn * C + c) * S;
		for (int64_t q = 0; q < body; q += BN_LANES) {
			#pragma omp simd
			for (int l = 0; l < BN_LANES; l++) {
				double v = xr[q + l];
				a[l] += v;
				b[l] += v * v;
			}
		}
		for (int64_t q = body; q < S; q++) {
			double v = xr[q];
			ta += v;
			tb += v * v;
		}
	}
	for (int l = 0; l < BN_LANES; l++) {
		ta += a[l];
		tb += b[l];
	}
	*s = ta;
	*ss = tb;
}

/* mean[c] and rstd[c] = 1 / sqrt(var + eps) with the biased variance, from
 * the sums of M values. When rm is not NULL, the running statistics move
 * by momentum towards the batch mean and the unbiased variance:
 * rm = (1 - momentum) rm + momentum mean. */
static void bn_set_stats(float *mean, float *rstd, float *rm, float *rv, double momentum,
			 int64_t c, double s, double ss, double M, double eps)
{
	double mu = M > 0 ? s / M : 0.0;
	double var = M > 0 ? ss / M - mu * mu : 0.0;
	if (var < 0)
		var = 0;
	mean[c] = (float)mu;
	rstd[c] = (float)(1.0 / sqrt(var + eps));
	if (rm && M > 0) {
		/* PyTorch errors on one value per channel; dlrun keeps the
		 * biased variance then */
		double unb = M > 1 ? var * M / (M - 1) : var;
		rm[c] = (float)((1.0 - momentum) * rm[c] + momentum * mu);
		rv[c] = (float)((1.0 - momentum) * rv[c] + momentum * unb);
	}
}

/* Batch statistics of x [N, C, S] per channel (bn_set_stats). */
static void bn_stats(float *mean, float *rstd, float *rm, float *rv, double momentum,
		     const float *x, int64_t N, int64_t C, int64_t S, double eps)
{
	#pragma omp parallel for schedule(static) if (N * C * S > PAR_MIN)
	for (int64_t c = 0; c < C; c++) {
		double s, ss;
		bn_channel_sums(x, N, C, S, c, &s, &ss);
		bn_set_stats(mean, rstd, rm, rv, momentum, c, s, ss, (double)(N * S), eps);
	}
}

/* y = (x - mean) rstd w + b per channel; w, b may be NULL (1, 0). */
DL_CLONES static void bn_forward(float *y, const float *x, const float *mean,
		       const float *rstd, const float *w, const float *b,
		       int64_t N, int64_t C, int64_t S)
{
	#pragma omp parallel for schedule(static) if (N * C * S > PAR_MIN)
	for (int64_t r = 0; r < N * C; r++) {
		int64_t c = r % C;
		float scale = rstd[c] * (w ? w[c] : 1.0f);
		float shift = (b ? b[c] : 0.0f) - mean[c] * scale;
		const float *restrict xr = x + r * S;
		float *restrict yr = y + r * S;
		#pragma omp simd
		for (int64_t q = 0; q < S; q++)
			yr[q] = xr[q] * scale + shift;
	}
}

/* Channel c of dy and x [N, C, S]: *sdy = sum dy, *sdyx = sum dy xhat
 * with xhat = (x - mu) rs. Elements q and q + BN_LANES are added in float
 * first (one rounding, relative to their own sum), then go to the double
 * lane: half the float-to-double conversions of one value at a time, which
 * keeps this pass as fast as the per-image float sums it replaced. */
DL_CLONES static void bn_channel_grad_sums(const float *dy, const float *x, float mu, float rs,
					   int64_t N, int64_t C, int64_t S, int64_t c,
					   double *sdy, double *sdyx)
{
	double a[BN_LANES] = {0}, b[BN_LANES] = {0}, ta = 0.0, tb = 0.0;
	int64_t body = S - S % (2 * BN_LANES);
	for (int64_t nn = 0; nn < N; nn++) {
		const float *xr = x + (nn * C + c) * S, *dyr = dy + (nn * C + c) * S;
		for (int64_t q = 0; q < body; q += 2 * BN_LANES) {
			#pragma omp simd
			for (int l = 0; l < BN_LANES; l++) {
				float d0 = dyr[q + l], d1 = dyr[q + BN_LANES + l];
				a[l] += (double)(d0 + d1);
				b[l] += (double)(d0 * (xr[q + l] - mu) +
						 d1 * (xr[q + BN_LANES + l] - mu));
			}
		}
		for (int64_t q = body; q < S; q++) {
			ta += dyr[q];
			tb += (double)dyr[q] * (xr[q] - mu);
		}
	}
	for (int l = 0; l < BN_LANES; l++) {
		ta += a[l];
		tb += b[l];
	}
	*sdy = ta;
	*sdyx = tb * rs;
}

/* Channel c: dx += k (dy - mdy - xhat mdyx), xhat = (x - mu) rs. */
DL_CLONES static void bn_channel_dx(float *dx, const float *dy, const float *x, float mu,
				    float rs, float k, float mdy, float mdyx, int64_t N,
				    int64_t C, int64_t S, int64_t c)
{
	for (int64_t nn = 0; nn < N; nn++) {
		const float *restrict xr = x + (nn * C + c) * S;
		const float *restrict dyr = dy + (nn * C + c) * S;
		float *restrict dxr = dx + (nn * C + c) * S;
		#pragma omp simd
		for (int64_t q = 0; q < S; q++) {
			float xhat = (xr[q] - mu) * rs;
			dxr[q] += k * (dyr[q] - mdy - xhat * mdyx);
		}
	}
}

/* batch: dx += w rstd (dy - mean(dy) - xhat mean(dy xhat)) (statistics of
 * the batch); else dx += w rstd dy (fixed running statistics).
 * dw += sum dy xhat, db += sum dy. Any of dx, dw, db may be NULL. */
static void bn_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
			const float *mean, const float *rstd, const float *w, int64_t N,
			int64_t C, int64_t S, int batch)
{
	double M = (double)(N * S);
	#pragma omp parallel for schedule(static) if (N * C * S > PAR_MIN)
	for (int64_t c = 0; c < C; c++) {
		double sdy, sdyx;
		bn_channel_grad_sums(dy, x, mean[c], rstd[c], N, C, S, c, &sdy, &sdyx);
		if (dw)
			dw[c] += (float)sdyx;
		if (db)
			db[c] += (float)sdy;
		if (!dx)
			continue;
		float mdy = batch && M > 0 ? (float)(sdy / M) : 0.0f;
		float mdyx = batch && M > 0 ? (float)(sdyx / M) : 0.0f;
		bn_channel_dx(dx, dy, x, mean[c], rstd[c], rstd[c] * (w ? w[c] : 1.0f), mdy,
			      mdyx, N, C, S, c);
	}
}

/* --sync-batch-norm: bn_stats over the samples of every process (sums of
 * x and x^2 and the count all-reduced in double), so each process
 * normalises with the statistics of the whole global batch. */
static void bn_stats_sync(const struct dl_shard *sh, double *buf, float *mean, float *rstd,
			  float *rm, float *rv, double momentum, const float *x, int64_t N,
			  int64_t C, int64_t S, double eps)
{
	/* buf: 2 C + 1 doubles of the node's workspace, planned */
	memset(buf, 0, (size_t)(2 * C + 1) * sizeof *buf);
	#pragma omp parallel for schedule(static) if (N * C * S > PAR_MIN)
	for (int64_t c = 0; c < C; c++)
		bn_channel_sums(x, N, C, S, c, &buf[c], &buf[C + c]);
	buf[2 * C] = (double)(N * S);
	sh->allreduce(sh, buf, (int)(2 * C + 1));
	for (int64_t c = 0; c < C; c++)
		bn_set_stats(mean, rstd, rm, rv, momentum, c, buf[c], buf[C + c], buf[2 * C], eps);
}

/* bn_backward with the batch means of dy and dy xhat taken over every
 * process. Each process back-propagates its own shard's mean loss, whose
 * gradients count sh->weight in the global one, so the sums are weighted
 * before the all-reduce and dx is scaled back by 1 / weight. dw and db get
 * the local sums (the gradient all-reduce weights them). */
static void bn_backward_sync(const struct dl_shard *sh, double *buf, float *dx, float *dw,
			     float *db, const float *dy, const float *x, const float *mean,
			     const float *rstd, const float *w, int64_t N, int64_t C, int64_t S)
{
	memset(buf, 0, (size_t)(2 * C + 1) * sizeof *buf);
	#pragma omp parallel for schedule(static) if (N * C * S > PAR_MIN)
	for (int64_t c = 0; c < C; c++) {
		double sdy, sdyx;
		bn_channel_grad_sums(dy, x, mean[c], rstd[c], N, C, S, c, &sdy, &sdyx);
		if (dw)
			dw[c] += (float)sdyx;
		if (db)
			db[c] += (float)sdy;
		buf[c] = sh->weight * sdy;
		buf[C + c] = sh->weight * sdyx;
	}
	buf[2 * C] = (double)(N * S);
	sh->allreduce(sh, buf, (int)(2 * C + 1));
	double M = buf[2 * C];
	if (dx && N > 0 && sh->weight > 0 && M > 0) {
		#pragma omp parallel for schedule(static) if (N * C * S > PAR_MIN)
		for (int64_t c = 0; c < C; c++)
			bn_channel_dx(dx, dy, x, mean[c], rstd[c], rstd[c] * (w ? w[c] : 1.0f),
				      (float)(buf[c] / M / sh->weight),
				      (float)(buf[C + c] / M / sh->weight), N, C, S, c);
	}
}

/* Running statistics as mean and rstd. */
static void bn_running(float *mean, float *rstd, const float *rm,
		       const float *rv, int64_t C, double eps)
{
	for (int64_t c = 0; c < C; c++) {
		mean[c] = rm[c];
		rstd[c] = (float)(1.0 / sqrt((double)rv[c] + eps));
	}
}

static void bn_op_forward(struct dl_node *n, const struct dl_tensor *in,
			  struct dl_tensor *out, struct dl_ctx *ctx)
{
	int64_t N, C, S;
	bn_shape(n, &in[0].shape, &N, &C, &S, NULL);
	double eps = n->hp[HB_EPS].f, mom = n->hp[HB_MOMENTUM].f;
	float *rm = param_data(n, "running_mean"), *rv = param_data(n, "running_var");
	float *stats = ctx->saved ? ctx->saved : ctx->ws;
	float *mean = stats, *rstd = stats + C;
	if (ctx->train && ctx->saved && ctx->shard && ctx->shard->sync_bn)
		bn_stats_sync(ctx->shard, ctx->ws, mean, rstd, rm, rv, mom, in[0].data, N, C, S,
			      eps);
	else if (ctx->train || !rm)
		bn_stats(mean, rstd, ctx->train ? rm : NULL, rv, mom, in[0].data,
			 N, C, S, eps);
	else
		bn_running(mean, rstd, rm, rv, C, eps);
	bn_forward(out->data, in[0].data, mean, rstd, param_data(n, "weight"),
		   param_data(n, "bias"), N, C, S);
}

static void bn_op_backward(struct dl_node *n, const struct dl_tensor *in,
			   const struct dl_tensor *out, const float *dout,
			   float *const *din, struct dl_ctx *ctx)
{
	int64_t N, C, S;
	(void)out;
	bn_shape(n, &in[0].shape, &N, &C, &S, NULL);
	double eps = n->hp[HB_EPS].f;
	float *rm = param_data(n, "running_mean"), *rv = param_data(n, "running_var");
	int batch = ctx->train || !rm;
	float *mean, *rstd;
	if (batch && ctx->saved) {
		mean = ctx->saved;
		rstd = mean + C;
	} else {
		mean = ctx->ws;
		rstd = mean + C;
		if (batch)
			bn_stats(mean, rstd, NULL, NULL, 0.0, in[0].data, N, C, S, eps);
		else
			bn_running(mean, rstd, rm, rv, C, eps);
	}
	if (batch && ctx->saved && ctx->shard && ctx->shard->sync_bn) {
		bn_backward_sync(ctx->shard, ctx->ws, din ? din[0] : NULL, param_grad(n, "weight"),
				 param_grad(n, "bias"), dout, in[0].data, mean, rstd,
				 param_data(n, "weight"), N, C, S);
		return;
	}
	bn_backward(din ? din[0] : NULL, param_grad(n, "weight"),
		    param_grad(n, "bias"), dout, in[0].data, mean, rstd,
		    param_data(n, "weight"), N, C, S, batch);
}

/* y = (x - E[x]) / sqrt(Var[x] + eps) * weight + bias per channel, over
 * the batch (and length) */
static const struct dl_op_desc batch_norm1d_op = {
	.name = "batch_norm1d",
	.doc = "y = (x - mean_c) / sqrt(var_c + eps) * weight_c + bias_c, over N (and L)",
	.min_in = 1, .max_in = 1,
	.hp = bn_hp, .n_hp = N_BN_HP,
	.infer = bn_infer, .forward = bn_op_forward, .backward = bn_op_backward,
	.params = "weight [num_features], bias [num_features] (affine); buffers running_mean, running_var [num_features]",
	.flags = DL_OP_BWD_NO_OUTPUT,
	.fuse = DL_FUSE_BATCH_NORM,
};

static const struct dl_op_desc batch_norm2d_op = {
	.name = "batch_norm2d",
	.doc = "y = (x - mean_c) / sqrt(var_c + eps) * weight_c + bias_c, over N, H, W",
	.min_in = 1, .max_in = 1,
	.hp = bn_hp, .n_hp = N_BN_HP,
	.infer = bn_infer, .forward = bn_op_forward, .backward = bn_op_backward,
	.params = "weight [num_features], bias [num_features] (affine); buffers running_mean, running_var [num_features]",
	.flags = DL_OP_BWD_NO_OUTPUT,
	.fuse = DL_FUSE_BATCH_NORM,
};

static const struct dl_op_desc batch_norm3d_op = {
	.name = "batch_norm3d",
	.doc = "y = (x - mean_c) / sqrt(var_c + eps) * weight_c + bias_c, over N, D, H, W",
	.min_in = 1, .max_in = 1,
	.hp = bn_hp, .n_hp = N_BN_HP,
	.infer = bn_infer, .forward = bn_op_forward, .backward = bn_op_backward,
	.params = "weight [num_features], bias [num_features] (affine); buffers running_mean, running_var [num_features]",
	.flags = DL_OP_BWD_NO_OUTPUT,
};

/* ---- layer norm ---- */

enum { HL_SHAPE, HL_EPS, HL_AFFINE, HL_BIAS, N_LN_HP };

static const struct dl_hp_desc ln_hp[N_LN_HP] = {
	{"normalized_shape", DL_HP_INTS, "inferred", NULL, DL_HP_DERIVED | DL_HP_POSITIVE},
	{"eps", DL_HP_FLOAT, "1e-5", NULL, DL_HP_NONNEG},
	{"elementwise_affine", DL_HP_BOOL, "true", NULL, 0},
	{"bias", DL_HP_BOOL, "true", NULL, 0},
};

/* Rows R and row length D: the input is [R..., D...] with D... the
 * normalized_shape (default: the last dimension). */
static int ln_shape(const struct dl_node *n, const struct dl_shape *in,
		    int *k, int64_t *R, int64_t *D, struct dl_error *err)
{
	char a[64];
	const struct dl_hp_value *v = &n->hp[HL_SHAPE];
	if (in->ndim < 2)
		return dl_node_error(err, n, -1, "expects an input of at least 2 dimensions [N, ..., D], got %s",
				     dl_shape_str(in, a, sizeof a));
	*k = v->set ? v->n : 1;
	if (*k > in->ndim - 1)
		return dl_node_error(err, n, HL_SHAPE,
			"normalized_shape has %d sizes but the input %s has only %d after the batch",
			*k, dl_shape_str(in, a, sizeof a), in->ndim - 1);
	for (int i = 0; v->set && i < *k; i++)
		if (v->v[i] != in->d[in->ndim - *k + i]) {
			char b[160];
			struct dl_shape want = dl_shape_make(*k, v->v);
			return dl_node_error(err, n, HL_SHAPE,
				"normalized_shape %s does not match the trailing sizes of the input %s",
				dl_shape_str(&want, b, sizeof b), dl_shape_str(in, a, sizeof a));
		}
	*D = dl_shape_prod(in, in->ndim - *k, in->ndim);
	*R = dl_shape_prod(in, 0, in->ndim - *k);
	if (*D == 0)
		return dl_node_error(err, n, -1, "cannot normalise over an empty shape (input %s)",
				     dl_shape_str(in, a, sizeof a));
	return 0;
}

static int ln_infer(struct dl_node *n, const struct dl_shape *in,
		    struct dl_shape *out, struct dl_error *err)
{
	int k;
	int64_t R, D;
	int rc = ln_shape(n, &in[0], &k, &R, &D, err);
	if (rc)
		return rc;
	struct dl_shape ps = dl_shape_make(k, in[0].d + in[0].ndim - k);
	if (n->hp[HL_AFFINE].i) {
		if ((rc = dl_node_param(n, "weight", &ps, DL_INIT_ONES, 0, err)) < 0)
			return rc;
		if (n->hp[HL_BIAS].i &&
		    (rc = dl_node_param(n, "bias", &ps, DL_INIT_ZEROS, 0, err)) < 0)
			return rc;
	}
	*out = in[0];
	n->saved_bytes = (size_t)(2 * R) * sizeof(float);
	n->ws_bytes = (size_t)(2 * R) * sizeof(float);
	n->macs = 2 * R * D;
	return 0;
}

/* Mean and rstd of one row x [D]: two passes (sum, then squared
 * deviations) accumulated in double. */
DL_CLONES static void row_stats(const float *restrict x, int64_t D, double eps,
				float *mean, float *rstd)
{
	double s = 0.0;
	#pragma omp simd reduction(+:s)
	for (int64_t d = 0; d < D; d++)
		s += x[d];
	float m = (float)(s / (double)D);
	double ss = 0.0;
	#pragma omp simd reduction(+:ss)
	for (int64_t d = 0; d < D; d++) {
		float t = x[d] - m;
		ss += (double)t * t;
	}
	*mean = m;
	*rstd = (float)(1.0 / sqrt(ss / (double)D + eps));
}

/* out [R, D] = (inp - mean) rstd * weight + bias per row; mean, rstd [R]
 * are written. weight, bias may be NULL. */
DL_CLONES static void layernorm_forward(float *out, float *mean, float *rstd,
					const float *inp, const float *weight,
					const float *bias, int64_t R, int64_t D,
					double eps)
{
	#pragma omp parallel for schedule(static) if (R * D > PAR_MIN)
	for (int64_t r = 0; r < R; r++) {
		const float *restrict x = inp + r * D;
		float *restrict y = out + r * D;
		float m, rs;
		row_stats(x, D, eps, &m, &rs);
		if (weight && bias) {
			#pragma omp simd
			for (int64_t d = 0; d < D; d++)
				y[d] = (x[d] - m) * rs * weight[d] + bias[d];
		} else if (weight) {
			#pragma omp simd
			for (int64_t d = 0; d < D; d++)
				y[d] = (x[d] - m) * rs * weight[d];
		} else {
			#pragma omp simd
			for (int64_t d = 0; d < D; d++)
				y[d] = (x[d] - m) * rs;
		}
		mean[r] = m;
		rstd[r] = rs;
	}
}

/* dinp += rstd (dnorm - mean(dnorm) - xhat mean(dnorm xhat)) with
 * dnorm = dout * weight; dweight += sum over rows dout xhat, dbias += sum
 * dout. Any of dinp, dweight, dbias may be NULL. */
DL_CLONES static void layernorm_backward(float *dinp, float *dweight, float *dbias,
			       const float *dout, const float *inp,
			       const float *weight, const float *mean,
			       const float *rstd, int64_t R, int64_t D)
{
	if (dinp) {
		#pragma omp parallel for schedule(static) if (R * D > PAR_MIN)
		for (int64_t r = 0; r < R; r++) {
			const float *x = inp + r * D, *dy = dout + r * D;
			float *dx = dinp + r * D;
			float m = mean[r], rs = rstd[r];
			double a = 0.0, b = 0.0;
			#pragma omp simd reduction(+:a, b)
			for (int64_t d = 0; d < D; d++) {
				float dn = dy[d] * (weight ? weight[d] : 1.0f);
				a += dn;
				b += (double)dn * ((x[d] - m) * rs);
			}
			float ma = (float)(a / (double)D), mb = (float)(b / (double)D);
			#pragma omp simd
			for (int64_t d = 0; d < D; d++) {
				float dn = dy[d] * (weight ? weight[d] : 1.0f);
				float xhat = (x[d] - m) * rs;
				dx[d] += rs * (dn - ma - xhat * mb);
			}
		}
	}
	if (!dweight && !dbias)
		return;
	/* columns in contiguous chunks per thread: no shared sums */
	#pragma omp parallel if (R * D > PAR_MIN)
	{
		int64_t lo = 0, hi = D;
#ifdef _OPENMP
		int t = omp_get_thread_num(), nt = omp_get_num_threads();
		lo = D * t / nt;
		hi = D * (t + 1) / nt;
#endif
		for (int64_t r = 0; r < R; r++) {
			const float *x = inp + r * D, *dy = dout + r * D;
			float m = mean[r], rs = rstd[r];
			if (dweight) {
				#pragma omp simd
				for (int64_t d = lo; d < hi; d++)
					dweight[d] += dy[d] * ((x[d] - m) * rs);
			}
			if (dbias) {
				#pragma omp simd
				for (int64_t d = lo; d < hi; d++)
					dbias[d] += dy[d];
			}
		}
	}
}

/* mean and rstd of each row, as layernorm_forward computes them */
static void layernorm_stats(float *mean, float *rstd, const float *inp,
			    int64_t R, int64_t D, double eps)
{
	#pragma omp parallel for schedule(static) if (R * D > PAR_MIN)
	for (int64_t r = 0; r < R; r++)
		row_stats(inp + r * D, D, eps, &mean[r], &rstd[r]);
}

static void ln_op_forward(struct dl_node *n, const struct dl_tensor *in,
			  struct dl_tensor *out, struct dl_ctx *ctx)
{
	int k;
	int64_t R, D;
	ln_shape(n, &in[0].shape, &k, &R, &D, NULL);
	float *stats = ctx->saved ? ctx->saved : ctx->ws;
	layernorm_forward(out->data, stats, stats + R, in[0].data,
			  param_data(n, "weight"), param_data(n, "bias"), R, D,
			  n->hp[HL_EPS].f);
}

static void ln_op_backward(struct dl_node *n, const struct dl_tensor *in,
			   const struct dl_tensor *out, const float *dout,
			   float *const *din, struct dl_ctx *ctx)
{
	int k;
	int64_t R, D;
	(void)out;
	ln_shape(n, &in[0].shape, &k, &R, &D, NULL);
	float *stats = ctx->saved;
	if (!stats) {
		stats = ctx->ws;
		layernorm_stats(stats, stats + R, in[0].data, R, D, n->hp[HL_EPS].f);
	}
	layernorm_backward(din ? din[0] : NULL, param_grad(n, "weight"),
			   param_grad(n, "bias"), dout, in[0].data,
			   param_data(n, "weight"), stats, stats + R, R, D);
}

/* Position by position while the token axis is not among the normalized
 * trailing dimensions. */
static int ln_step(struct dl_node *n, const struct dl_shape *in,
		   const int *in_axis, int *out_axis, int64_t max_len,
		   struct dl_error *err)
{
	int rc = dl_step_pointwise(n, in, in_axis, out_axis, max_len, err);
	int k = n->hp[HL_SHAPE].n > 0 ? n->hp[HL_SHAPE].n : 1;
	if (rc == 0 && out_axis[0] <= k)
		return dl_node_error(err, n, HL_SHAPE,
			"it normalizes over the token positions, so the model cannot be "
			"decoded step by step");
	return rc;
}

/* y = (x - E[x]) / sqrt(Var[x] + eps) * weight + bias over the trailing
 * normalized_shape */
static const struct dl_op_desc layer_norm_op = {
	.name = "layer_norm",
	.doc = "y = (x - mean) / sqrt(var + eps) * weight + bias over the trailing normalized_shape",
	.min_in = 1, .max_in = 1,
	.hp = ln_hp, .n_hp = N_LN_HP,
	.infer = ln_infer, .forward = ln_op_forward, .backward = ln_op_backward,
	.params = "weight [normalized_shape], bias [normalized_shape] (elementwise_affine)",
	.flags = DL_OP_BWD_NO_OUTPUT,
	.step = ln_step,
};

/* ---- group norm and instance norm ---- */

/* group_norm: num_groups, num_channels (inferred), eps, affine */
enum { HG_GROUPS, HG_CHANNELS, HG_EPS, HG_AFFINE, N_GN_HP };
/* instance norms: PyTorch's InstanceNorm1d/2d arguments and defaults */
enum { HI_NUM, HI_EPS, HI_MOMENTUM, HI_AFFINE, HI_TRACK, N_IN_HP };

static const struct dl_hp_desc gn_hp[N_GN_HP] = {
	{"num_groups", DL_HP_INT, NULL, NULL, DL_HP_REQUIRED | DL_HP_POSITIVE},
	{"num_channels", DL_HP_INT, "inferred", NULL, DL_HP_DERIVED | DL_HP_POSITIVE},
	{"eps", DL_HP_FLOAT, "1e-5", NULL, DL_HP_NONNEG},
	{"affine", DL_HP_BOOL, "true", NULL, 0},
};

static const struct dl_hp_desc in_hp[N_IN_HP] = {
	{"num_features", DL_HP_INT, "inferred", NULL, DL_HP_DERIVED | DL_HP_POSITIVE},
	{"eps", DL_HP_FLOAT, "1e-5", NULL, DL_HP_NONNEG},
	{"momentum", DL_HP_FLOAT, "0.1", NULL, DL_HP_NONNEG},
	{"affine", DL_HP_BOOL, "false", NULL, 0},
	{"track_running_stats", DL_HP_BOOL, "false", NULL, 0},
};

static int is_group_norm(const struct dl_node *n)
{
	return n->op->hp == gn_hp;
}

/* Input [N, C, S...] seen as [N, G, C/G, S]: group_norm's groups, or one
 * group per channel for the instance norms. */
static int gn_shape(const struct dl_node *n, const struct dl_shape *in,
		    int64_t *N, int64_t *C, int64_t *G, int64_t *S,
		    struct dl_error *err)
{
	char a[64];
	int gn = is_group_norm(n);
	int two_d = strcmp(n->op->name, "instance_norm2d") == 0;
	if (gn && in->ndim < 2)
		return dl_node_error(err, n, -1, "expects an [N, C, ...] input, got %s",
				     dl_shape_str(in, a, sizeof a));
	if (!gn && in->ndim != (two_d ? 4 : 3))
		return dl_node_error(err, n, -1, "expects a %s input, got %s%s",
				     two_d ? "[N, C, H, W]" : "[N, C, L]",
				     dl_shape_str(in, a, sizeof a),
				     in->ndim == (two_d ? 3 : 4) ? two_d ?
				     " (instance_norm1d takes [N, C, L])" :
				     " (instance_norm2d takes [N, C, H, W])" : "");
	*N = in->d[0];
	*C = in->d[1];
	*S = dl_shape_prod(in, 2, in->ndim);
	if (*C == 0)
		return dl_node_error(err, n, -1, "expects at least one channel, got %s",
				     dl_shape_str(in, a, sizeof a));
	int hc = gn ? HG_CHANNELS : HI_NUM;
	if (n->hp[hc].set && n->hp[hc].i != *C)
		return dl_node_error(err, n, hc,
			"%s %lld does not match the input's %lld channels (input %s)",
			gn ? "num_channels" : "num_features", (long long)n->hp[hc].i,
			(long long)*C, dl_shape_str(in, a, sizeof a));
	if (!gn) {
		*G = *C;
		return 0;
	}
	*G = n->hp[HG_GROUPS].i;
	if (*C % *G != 0)
		return dl_node_error(err, n, HG_GROUPS,
			"num_groups %lld does not divide the input's %lld channels (input %s)",
			(long long)*G, (long long)*C, dl_shape_str(in, a, sizeof a));
	return 0;
}

static int gn_infer(struct dl_node *n, const struct dl_shape *in,
		    struct dl_shape *out, struct dl_error *err)
{
	int64_t N, C, G, S;
	int rc = gn_shape(n, &in[0], &N, &C, &G, &S, err);
	if (rc)
		return rc;
	struct dl_shape cs = dl_shape_make(1, &C);
	if (n->hp[is_group_norm(n) ? HG_AFFINE : HI_AFFINE].i) {
		if ((rc = dl_node_param(n, "weight", &cs, DL_INIT_ONES, 0, err)) < 0 ||
		    (rc = dl_node_param(n, "bias", &cs, DL_INIT_ZEROS, 0, err)) < 0)
			return rc;
	}
	if (!is_group_norm(n) && n->hp[HI_TRACK].i) {
		if ((rc = dl_node_buffer(n, "running_mean", &cs, DL_INIT_ZEROS, 0, err)) < 0 ||
		    (rc = dl_node_buffer(n, "running_var", &cs, DL_INIT_ONES, 0, err)) < 0)
			return rc;
	}
	*out = in[0];
	n->saved_bytes = (size_t)(2 * N * G) * sizeof(float);   /* mean, rstd */
	n->ws_bytes = (size_t)(2 * N * G) * sizeof(float);
	n->macs = 2 * N * C * S;
	return 0;
}

/* y [N, C, S] = (x - mean) rstd * w[c] + b[c], statistics per sample and
 * group of C/G channels (rows of D = C/G S values); mean, rstd [N G] are
 * written, or read when given (running statistics). w, b may be NULL (1,
 * 0). */
DL_CLONES static void groupnorm_forward(float *y, float *mean, float *rstd,
					const float *x, const float *w,
					const float *b, int64_t N, int64_t C,
					int64_t G, int64_t S, double eps, int given)
{
	int64_t cg = C / G, D = cg * S;
	#pragma omp parallel for schedule(static) if (N * C * S > PAR_MIN)
	for (int64_t r = 0; r < N * G; r++) {
		float m, rs;
		if (given) {
			m = mean[r];
			rs = rstd[r];
		} else {
			row_stats(x + r * D, D, eps, &m, &rs);
			mean[r] = m;
			rstd[r] = rs;
		}
		for (int64_t k = 0; k < cg; k++) {
			int64_t c = r % G * cg + k;
			float scale = rs * (w ? w[c] : 1.0f), shift = b ? b[c] : 0.0f;
			const float *restrict xr = x + r * D + k * S;
			float *restrict yr = y + r * D + k * S;
			#pragma omp simd
			for (int64_t q = 0; q < S; q++)
				yr[q] = (xr[q] - m) * scale + shift;
		}
	}
}

/* Per row (sample, group): dx += rstd (dn - mean(dn) - xhat mean(dn xhat))
 * with dn = dy w[c] (statistics of the row), or dx += rstd dn (fixed
 * running statistics, own == 0); dw[c] += sum over samples dy xhat, db[c]
 * += sum dy. Any of dx, dw, db may be NULL. */
DL_CLONES static void groupnorm_backward(float *dx, float *dw, float *db,
					 const float *dy, const float *x,
					 const float *w, const float *mean,
					 const float *rstd, int64_t N, int64_t C,
					 int64_t G, int64_t S, int own)
{
	int64_t cg = C / G, D = cg * S;
	if (dx) {
		#pragma omp parallel for schedule(static) if (N * C * S > PAR_MIN)
		for (int64_t r = 0; r < N * G; r++) {
			float m = mean[r], rs = rstd[r];
			double a = 0.0, bb = 0.0;
			for (int64_t k = 0; k < cg; k++) {
				float wc = w ? w[r % G * cg + k] : 1.0f;
				const float *xr = x + r * D + k * S, *dyr = dy + r * D + k * S;
				#pragma omp simd reduction(+:a, bb)
				for (int64_t q = 0; q < S; q++) {
					float dn = dyr[q] * wc;
					a += dn;
					bb += (double)dn * ((xr[q] - m) * rs);
				}
			}
			float ma = own ? (float)(a / (double)D) : 0.0f;
			float mb = own ? (float)(bb / (double)D) : 0.0f;
			for (int64_t k = 0; k < cg; k++) {
				float wc = w ? w[r % G * cg + k] : 1.0f;
				const float *xr = x + r * D + k * S, *dyr = dy + r * D + k * S;
				float *dxr = dx + r * D + k * S;
				#pragma omp simd
				for (int64_t q = 0; q < S; q++) {
					float xhat = (xr[q] - m) * rs;
					dxr[q] += rs * (dyr[q] * wc - ma - xhat * mb);
				}
			}
		}
	}
	if (!dw && !db)
		return;
	#pragma omp parallel for schedule(static) if (N * C * S > PAR_MIN)
	for (int64_t c = 0; c < C; c++) {
		double sw = 0.0, sb = 0.0;
		for (int64_t nn = 0; nn < N; nn++) {
			int64_t r = nn * G + c / cg;
			float m = mean[r], rs = rstd[r];
			const float *xr = x + (nn * C + c) * S, *dyr = dy + (nn * C + c) * S;
			#pragma omp simd reduction(+:sw, sb)
			for (int64_t q = 0; q < S; q++) {
				sw += (double)dyr[q] * ((xr[q] - m) * rs);
				sb += dyr[q];
			}
		}
		if (dw)
			dw[c] += (float)sw;
		if (db)
			db[c] += (float)sb;
	}
}

/* mean and rstd of each (sample, group) row, as groupnorm_forward has them */
static void groupnorm_stats(float *mean, float *rstd, const float *x,
			    int64_t R, int64_t D, double eps)
{
	#pragma omp parallel for schedule(static) if (R * D > PAR_MIN)
	for (int64_t r = 0; r < R; r++)
		row_stats(x + r * D, D, eps, &mean[r], &rstd[r]);
}

static double gn_eps(const struct dl_node *n)
{
	return n->hp[is_group_norm(n) ? HG_EPS : HI_EPS].f;
}

/* Instance norms with track_running_stats, in training: PyTorch's
 * F.instance_norm runs batch norm on [1, N C, S] with the running
 * statistics repeated N times, then averages them back over the samples:
 * rm = (1 - momentum) rm + momentum mean_n(mean[n, c]), rv likewise with
 * each instance's unbiased variance (the biased one when S is 1, where
 * PyTorch stops with an error). */
static void instance_running_update(float *rm, float *rv, const float *x,
				    int64_t N, int64_t C, int64_t S,
				    double momentum)
{
	if (N == 0 || S == 0)
		return;
	#pragma omp parallel for schedule(static) if (N * C * S > PAR_MIN)
	for (int64_t c = 0; c < C; c++) {
		double sm = 0.0, sv = 0.0;
		for (int64_t nn = 0; nn < N; nn++) {
			const float *xr = x + (nn * C + c) * S;
			double s = 0.0, ss = 0.0;
			for (int64_t q = 0; q < S; q++)
				s += xr[q];
			double mu = s / (double)S;
			for (int64_t q = 0; q < S; q++)
				ss += ((double)xr[q] - mu) * ((double)xr[q] - mu);
			sm += mu;
			sv += S > 1 ? ss / (double)(S - 1) : ss;
		}
		rm[c] = (float)((1.0 - momentum) * rm[c] + momentum * sm / (double)N);
		rv[c] = (float)((1.0 - momentum) * rv[c] + momentum * sv / (double)N);
	}
}

/* Running statistics as mean and rstd of every (sample, channel) row. */
static void instance_running(float *mean, float *rstd, const float *rm,
			     const float *rv, int64_t N, int64_t C, double eps)
{
	for (int64_t r = 0; r < N * C; r++) {
		mean[r] = rm[r % C];
		rstd[r] = (float)(1.0 / sqrt((double)rv[r % C] + eps));
	}
}

static void gn_op_forward(struct dl_node *n, const struct dl_tensor *in,
			  struct dl_tensor *out, struct dl_ctx *ctx)
{
	int64_t N, C, G, S;
	gn_shape(n, &in[0].shape, &N, &C, &G, &S, NULL);
	float *stats = ctx->saved ? ctx->saved : ctx->ws;
	float *rm = param_data(n, "running_mean"), *rv = param_data(n, "running_var");
	int running = rm && !ctx->train;
	if (running)
		instance_running(stats, stats + N * G, rm, rv, N, C, gn_eps(n));
	groupnorm_forward(out->data, stats, stats + N * G, in[0].data,
			  param_data(n, "weight"), param_data(n, "bias"), N, C, G,
			  S, gn_eps(n), running);
	if (rm && ctx->train)
		instance_running_update(rm, rv, in[0].data, N, C, S,
					n->hp[HI_MOMENTUM].f);
}

static void gn_op_backward(struct dl_node *n, const struct dl_tensor *in,
			   const struct dl_tensor *out, const float *dout,
			   float *const *din, struct dl_ctx *ctx)
{
	int64_t N, C, G, S;
	(void)out;
	gn_shape(n, &in[0].shape, &N, &C, &G, &S, NULL);
	float *rm = param_data(n, "running_mean"), *rv = param_data(n, "running_var");
	int own = !rm || ctx->train;
	float *stats = ctx->saved;
	if (!own || !stats) {
		stats = ctx->ws;
		if (own)
			groupnorm_stats(stats, stats + N * G, in[0].data, N * G,
					C / G * S, gn_eps(n));
		else
			instance_running(stats, stats + N * G, rm, rv, N, C, gn_eps(n));
	}
	groupnorm_backward(din ? din[0] : NULL, param_grad(n, "weight"),
			   param_grad(n, "bias"), dout, in[0].data,
			   param_data(n, "weight"), stats, stats + N * G, N, C, G, S,
			   own);
}

/* y = (x - E[x]) / sqrt(Var[x] + eps) * weight + bias, statistics per
 * sample over each group of C / num_groups channels (and all positions) */
static const struct dl_op_desc group_norm_op = {
	.name = "group_norm",
	.doc = "y = (x - mean_ng) / sqrt(var_ng + eps) * weight_c + bias_c, per sample over each group of channels",
	.min_in = 1, .max_in = 1,
	.hp = gn_hp, .n_hp = N_GN_HP,
	.infer = gn_infer, .forward = gn_op_forward, .backward = gn_op_backward,
	.params = "weight [num_channels], bias [num_channels] (affine)",
	.flags = DL_OP_BWD_NO_OUTPUT,
};

/* y = (x - E[x]) / sqrt(Var[x] + eps) (* weight + bias), statistics per
 * sample and channel: group_norm with one group per channel */
static const struct dl_op_desc instance_norm1d_op = {
	.name = "instance_norm1d",
	.doc = "y = (x - mean_nc) / sqrt(var_nc + eps) (* weight_c + bias_c), per sample and channel over L",
	.min_in = 1, .max_in = 1,
	.hp = in_hp, .n_hp = N_IN_HP,
	.infer = gn_infer, .forward = gn_op_forward, .backward = gn_op_backward,
	.params = "weight [num_features], bias [num_features] (affine: true); buffers running_mean, running_var [num_features] (track_running_stats: true)",
	.flags = DL_OP_BWD_NO_OUTPUT,
};

static const struct dl_op_desc instance_norm2d_op = {
	.name = "instance_norm2d",
	.doc = "y = (x - mean_nc) / sqrt(var_nc + eps) (* weight_c + bias_c), per sample and channel over H, W",
	.min_in = 1, .max_in = 1,
	.hp = in_hp, .n_hp = N_IN_HP,
	.infer = gn_infer, .forward = gn_op_forward, .backward = gn_op_backward,
	.params = "weight [num_features], bias [num_features] (affine: true); buffers running_mean, running_var [num_features] (track_running_stats: true)",
	.flags = DL_OP_BWD_NO_OUTPUT,
};

const struct dl_op_desc *const dl_ops_norm[] = {
	&batch_norm1d_op, &batch_norm2d_op, &batch_norm3d_op, &layer_norm_op, &group_norm_op,
	&instance_norm1d_op, &instance_norm2d_op, NULL,
};
