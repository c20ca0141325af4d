/* Activations: pointwise nonlinearities and softmax / log_softmax along one
 * dimension, with PyTorch's formulas (float32, as its CPU kernels).
 * macs: one per output element. */
#include <math.h>
#include <stddef.h>

#include "engine/op.h"
#include "engine/stepper.h"
#include "engine/vmath.h"
#include "ops/spatial.h"

#define PAR_MIN 32768 /* elements below which a loop stays serial */

/* ---- pointwise kernels: out, inp [n]; backward adds into dinp ---- */

static void relu_forward(float *out, const float *inp, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

static void relu_backward(float *dinp, const float *dout, const float *inp,
			  int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		/* both loads unconditional, so the select is a mask and the
		 * loop vectorises (a conditional load of dout compiled to a
		 * scalar branch on the sign of the data) */
		float g = dout[i];
		dinp[i] += inp[i] > 0.0f ? g : 0.0f;
	}
}

static void leaky_relu_forward(float *out, const float *inp, float slope,
			       int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		out[i] = inp[i] > 0.0f ? inp[i] : inp[i] * slope;
}

static void leaky_relu_backward(float *dinp, const float *dout,
				const float *inp, float slope, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float g = dout[i];
		dinp[i] += inp[i] > 0.0f ? g : g * slope;
	}
}

static void tanh_forward(float *out, const float *inp, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		out[i] = tanhf(inp[i]);
}

/* d tanh = 1 - y^2, from the output */
static void tanh_backward(float *dinp, const float *dout, const float *out,
			  int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		dinp[i] += dout[i] * (1.0f - out[i] * out[i]);
}

/* sigmoid and silu through dl_expf (src/engine/vmath.h): branch-free, so
 * the loops vectorise (glibc's scalar expf was 10% of efficientnet_b0's
 * batch-32 forward); the fused epilogue (src/engine/fuse.c) computes the
 * same expressions, so fused and unfused keep the same bits */
DL_CLONES static void sigmoid_forward(float *out, const float *inp, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		out[i] = 1.0f / (1.0f + dl_expf(-inp[i]));
}

/* d sigmoid = y (1 - y), from the output */
static void sigmoid_backward(float *dinp, const float *dout, const float *out,
			     int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		dinp[i] += dout[i] * (1.0f - out[i]) * out[i];
}

#define GELU_SQRT1_2 0.70710678118654752440f    /* 1 / sqrt(2) */
#define GELU_RSQRT2PI 0.39894228040143267794f   /* 1 / sqrt(2 pi) */
#define GELU_BETA 0.79788456080286535588f       /* sqrt(2 / pi) */
#define GELU_KAPPA 0.044715f

/* exact GELU through dl_erff (src/engine/vmath.h): branch-free, so the
 * loops vectorise; the fused epilogue (src/engine/fuse.c) computes the
 * same expression */
DL_CLONES static void gelu_forward(float *out, const float *inp, int approx, int64_t n)
{
	if (approx) {
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
		for (int64_t i = 0; i < n; i++) {
			float x = inp[i];
			float inner = GELU_BETA * (x + GELU_KAPPA * x * x * x);
			out[i] = 0.5f * x * (1.0f + tanhf(inner));
		}
	} else {
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
		for (int64_t i = 0; i < n; i++)
			out[i] = 0.5f * inp[i] * (1.0f + dl_erff(inp[i] * GELU_SQRT1_2));
	}
}

DL_CLONES static void gelu_backward(float *dinp, const float *dout, const float *inp,
			  int approx, int64_t n)
{
	if (approx) {
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
		for (int64_t i = 0; i < n; i++) {
			float x = inp[i], x2 = x * x;
			float th = tanhf(GELU_BETA * (x + GELU_KAPPA * x2 * x));
			float dleft = 0.5f * (1.0f + th);
			float dright = (1.0f - th * th) * GELU_BETA *
				       (1.0f + 3.0f * GELU_KAPPA * x2);
			dinp[i] += dout[i] * (dleft + 0.5f * x * dright);
		}
	} else {
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
		for (int64_t i = 0; i < n; i++) {
			float x = inp[i];
			float cdf = 0.5f * (1.0f + dl_erff(x * GELU_SQRT1_2));
			float pdf = GELU_RSQRT2PI * dl_expf(-0.5f * x * x);
			dinp[i] += dout[i] * (cdf + x * pdf);
		}
	}
}

DL_CLONES static void silu_forward(float *out, const float *inp, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		out[i] = inp[i] / (1.0f + dl_expf(-inp[i]));
}

/* d silu = s (1 + x (1 - s)), s = sigmoid(x) */
DL_CLONES static void silu_backward(float *dinp, const float *dout, const float *inp,
			  int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float s = 1.0f / (1.0f + dl_expf(-inp[i]));
		dinp[i] += dout[i] * s * (1.0f + inp[i] * (1.0f - s));
	}
}

/* PyTorch's: linear above the threshold, where exp would overflow */
static void softplus_forward(float *out, const float *inp, float beta,
			     float threshold, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float bx = inp[i] * beta;
		out[i] = bx > threshold ? inp[i] : log1pf(expf(bx)) / beta;
	}
}

static void softplus_backward(float *dinp, const float *dout, const float *inp,
			      float beta, float threshold, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float bx = inp[i] * beta;
		if (bx > threshold) {
			dinp[i] += dout[i];
		} else {
			float z = expf(bx);
			dinp[i] += dout[i] * z / (z + 1.0f);
		}
	}
}

static void relu_squared_forward(float *out, const float *inp, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float r = inp[i] > 0.0f ? inp[i] : 0.0f;
		out[i] = r * r;
	}
}

static void relu_squared_backward(float *dinp, const float *dout,
				  const float *inp, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float x = inp[i], g = dout[i];
		dinp[i] += x > 0.0f ? 2.0f * x * g : 0.0f;
	}
}

/* relu6 = hardtanh(x, 0, 6); its gradient is 0 at and outside the bounds,
 * as PyTorch's hardtanh_backward */
static void relu6_forward(float *out, const float *inp, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float v = inp[i] > 0.0f ? inp[i] : 0.0f;
		out[i] = v < 6.0f ? v : 6.0f;
	}
}

static void relu6_backward(float *dinp, const float *dout, const float *inp,
			   int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float x = inp[i], g = dout[i];
		dinp[i] += ((x > 0.0f) & (x < 6.0f)) ? g : 0.0f;
	}
}

/* x relu6(x + 3) / 6 */
static void hardswish_forward(float *out, const float *inp, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float v = inp[i] + 3.0f;
		v = v > 0.0f ? v : 0.0f;
		v = v < 6.0f ? v : 6.0f;
		out[i] = inp[i] * v / 6.0f;
	}
}

/* PyTorch's: 0 below -3, x / 3 + 1/2 on [-3, 3], 1 above 3 */
static void hardswish_backward(float *dinp, const float *dout,
			       const float *inp, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float x = inp[i], g = dout[i];
		float d = x <= 3.0f ? x / 3.0f + 0.5f : 1.0f;
		dinp[i] += x < -3.0f ? 0.0f : g * d;
	}
}

/* relu6(x + 3) / 6 */
static void hardsigmoid_forward(float *out, const float *inp, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		/* dividing first gives PyTorch's min(max(x + 3, 0), 6) / 6
		 * exactly and keeps the division out of the selects, so the
		 * loop vectorises */
		float v = (inp[i] + 3.0f) / 6.0f;
		v = v > 0.0f ? v : 0.0f;
		out[i] = v < 1.0f ? v : 1.0f;
	}
}

/* PyTorch's: 1/6 strictly inside (-3, 3), else 0 */
static void hardsigmoid_backward(float *dinp, const float *dout,
				 const float *inp, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float x = inp[i], g = dout[i];
		dinp[i] += (((x > -3.0f) & (x < 3.0f)) ? g : 0.0f) * (1.0f / 6.0f);
	}
}

#define SELU_ALPHA 1.6732632423543772848170429916717f
#define SELU_SCALE 1.0507009873554804934193349852946f

/* scale (x if x > 0 else alpha (exp(x) - 1)): elu is scale 1, selu its
 * constants */
static void elu_forward(float *out, const float *inp, float alpha,
			float scale, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float x = inp[i];
		out[i] = scale * (x > 0.0f ? x : alpha * expm1f(x));
	}
}

/* scale (1 if x > 0 else alpha exp(x)), PyTorch's elu_backward on the
 * input (x = 0 takes the exponential side) */
static void elu_backward(float *dinp, const float *dout, const float *inp,
			 float alpha, float scale, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float x = inp[i];
		dinp[i] += dout[i] * scale * (x > 0.0f ? 1.0f : alpha * expf(x));
	}
}

/* x tanh(softplus(x)), softplus = log1p(exp(x)) as PyTorch's kernel (exp
 * overflowing to inf gives tanh(inf) = 1, y = x) */
static void mish_forward(float *out, const float *inp, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		out[i] = inp[i] * tanhf(log1pf(expf(inp[i])));
}

/* d mish = t + x sigmoid(x) (1 - t^2), t = tanh(softplus(x)) */
static void mish_backward(float *dinp, const float *dout, const float *inp,
			  int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float x = inp[i];
		float s = 1.0f / (1.0f + expf(-x));
		float t = tanhf(log1pf(expf(x)));
		dinp[i] += dout[i] * (t + x * s * (1.0f - t * t));
	}
}

/* ---- softmax along one dimension: inp, out [outer, D, inner] ---- */

/* Columns j0..j0 + w of one [D, inner] slab (w <= DL_SOFTMAX_COLS): the
 * softmax over d of each, vectorised across the columns as PyTorch's
 * softmax over a dimension before the last; each column's sum runs over
 * d in float, as PyTorch's. The same exp as the rows (dl_exp_shifted). */
#define DL_SOFTMAX_COLS 64
static inline __attribute__((always_inline)) void
softmax_cols(float *y, const float *x, int64_t D, int64_t inner, int w, int log)
{
	float mx[DL_SOFTMAX_COLS], sum[DL_SOFTMAX_COLS];
	for (int j = 0; j < w; j++) {
		mx[j] = -INFINITY;
		sum[j] = 0.0f;
	}
	for (int64_t d = 0; d < D; d++) {
		const float *xd = x + d * inner;
		#pragma omp simd
		for (int j = 0; j < w; j++)
			mx[j] = xd[j] > mx[j] ? xd[j] : mx[j];
	}
	for (int64_t d = 0; d < D; d++) {
		const float *xd = x + d * inner;
		float *yd = y + d * inner;
		#pragma omp simd
		for (int j = 0; j < w; j++) {
			float e = dl_exp_shifted(xd[j], mx[j]);
			if (!log)
				yd[j] = e;
			sum[j] += e;
		}
	}
	for (int j = 0; j < w; j++)
		sum[j] = log ? logf(sum[j]) : 1.0f / sum[j];
	for (int64_t d = 0; d < D; d++) {
		const float *xd = x + d * inner;
		float *yd = y + d * inner;
		#pragma omp simd
		for (int j = 0; j < w; j++)
			yd[j] = log ? (xd[j] - mx[j]) - sum[j] : yd[j] * sum[j];
	}
}

/* The blocks of DL_SOFTMAX_COLS columns of one [D, inner] slab, and where
 * block b of [outer, D, inner] starts (its width in *w: the last one of a
 * slab may be narrower). */
static int64_t cols_blocks(int64_t inner)
{
	return (inner + DL_SOFTMAX_COLS - 1) / DL_SOFTMAX_COLS;
}

static inline int64_t cols_block(int64_t b, int64_t per, int64_t D, int64_t inner, int *w)
{
	int64_t j0 = b % per * DL_SOFTMAX_COLS;
	*w = (int)(inner - j0 < DL_SOFTMAX_COLS ? inner - j0 : DL_SOFTMAX_COLS);
	return b / per * D * inner + j0;
}

DL_CLONES static void softmax_forward(float *out, const float *inp, int64_t outer,
				      int64_t D, int64_t inner, int log)
{
	int64_t lanes = outer * inner;
	if (inner == 1) {
		/* rows (the last dimension): engine/vmath.h's vectorised
		 * pieces, the sums in float lanes as PyTorch's */
#pragma omp parallel for if (lanes * D > PAR_MIN)
		for (int64_t l = 0; l < lanes; l++) {
			const float *x = inp + l * D;
			float *y = out + l * D;
			if (!log) {
				dl_row_softmax(y, x, D);
				continue;
			}
			float max = dl_row_max(x, D);
			float lsum = logf(dl_row_exp_sum(x, D, max));
			#pragma omp simd
			for (int64_t d = 0; d < D; d++)
				y[d] = (x[d] - max) - lsum;
		}
		return;
	}
	/* a dimension before the last: blocks of columns */
	int64_t per = cols_blocks(inner);
#pragma omp parallel for if (lanes * D > PAR_MIN)
	for (int64_t b = 0; b < outer * per; b++) {
		int w;
		int64_t base = cols_block(b, per, D, inner, &w);
		softmax_cols(out + base, inp + base, D, inner, w, log);
	}
}

/* The backward of softmax_cols' columns: softmax's dx += y (dy - sum(dy y)),
 * log_softmax's dx += dy - exp(y) sum(dy), each column's sum over d in
 * float, vectorised across the columns. */
static inline __attribute__((always_inline)) void
softmax_cols_bwd(float *dx, const float *g, const float *y, int64_t D,
		 int64_t inner, int w, int log)
{
	float sum[DL_SOFTMAX_COLS];
	for (int j = 0; j < w; j++)
		sum[j] = 0.0f;
	for (int64_t d = 0; d < D; d++) {
		const float *gd = g + d * inner, *yd = y + d * inner;
		#pragma omp simd
		for (int j = 0; j < w; j++)
			sum[j] += log ? gd[j] : gd[j] * yd[j];
	}
	for (int64_t d = 0; d < D; d++) {
		const float *gd = g + d * inner, *yd = y + d * inner;
		float *dxd = dx + d * inner;
		#pragma omp simd
		for (int j = 0; j < w; j++)
			dxd[j] += log ? gd[j] - dl_exp_shifted(yd[j], 0.0f) * sum[j]
				      : yd[j] * (gd[j] - sum[j]);
	}
}

/* softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - exp(y) sum(dy),
 * exp(y) as the forward's (dl_exp_shifted). The sums run in float, in
 * vector lanes along the last dimension (dl_row_sum, dl_row_dot) and
 * across blocks of columns before it, as the forward's. */
DL_CLONES static void softmax_backward(float *dinp, const float *dout, const float *out,
				       int64_t outer, int64_t D, int64_t inner, int log)
{
	int64_t lanes = outer * inner;
	if (inner == 1) {
#pragma omp parallel for if (lanes * D > PAR_MIN)
		for (int64_t l = 0; l < lanes; l++) {
			const float *y = out + l * D, *g = dout + l * D;
			float *dx = dinp + l * D;
			float s = log ? dl_row_sum(g, D) : dl_row_dot(g, y, D);
			#pragma omp simd
			for (int64_t d = 0; d < D; d++)
				dx[d] += log ? g[d] - dl_exp_shifted(y[d], 0.0f) * s
					     : y[d] * (g[d] - s);
		}
		return;
	}
	int64_t per = cols_blocks(inner);
#pragma omp parallel for if (lanes * D > PAR_MIN)
	for (int64_t b = 0; b < outer * per; b++) {
		int w;
		int64_t base = cols_block(b, per, D, inner, &w);
		softmax_cols_bwd(dinp + base, dout + base, out + base, D, inner, w, log);
	}
}

/* ---- descriptors ---- */

static const struct dl_op_desc op_relu, op_leaky_relu, op_tanh, op_sigmoid,
	op_gelu, op_silu, op_softplus, op_relu_squared, op_softmax,
	op_log_softmax, op_relu6, op_hardswish, op_hardsigmoid, op_elu, op_selu,
	op_mish;

static int act_infer(struct dl_node *n, const struct dl_shape *in,
		     struct dl_shape *out, struct dl_error *err)
{
	*out = in[0];
	n->ws_bytes = 0;
	n->saved_bytes = 0;
	n->macs = dl_shape_numel(&in[0]);
	return 0;
}

static void act_fwd(struct dl_node *n, const struct dl_tensor *in,
		    struct dl_tensor *out, struct dl_ctx *ctx)
{
	const struct dl_op_desc *op = n->op;
	const float *x = in[0].data;
	float *y = out->data;
	int64_t len = dl_shape_numel(&in[0].shape);
	if (op == &op_relu)
		relu_forward(y, x, len);
	else if (op == &op_leaky_relu)
		leaky_relu_forward(y, x, (float)n->hp[0].f, len);
	else if (op == &op_tanh)
		tanh_forward(y, x, len);
	else if (op == &op_sigmoid)
		sigmoid_forward(y, x, len);
	else if (op == &op_gelu)
		gelu_forward(y, x, (int)n->hp[0].i, len);
	else if (op == &op_silu)
		silu_forward(y, x, len);
	else if (op == &op_softplus)
		softplus_forward(y, x, (float)n->hp[0].f, (float)n->hp[1].f, len);
	else if (op == &op_relu_squared)
		relu_squared_forward(y, x, len);
	else if (op == &op_relu6)
		relu6_forward(y, x, len);
	else if (op == &op_hardswish)
		hardswish_forward(y, x, len);
	else if (op == &op_hardsigmoid)
		hardsigmoid_forward(y, x, len);
	else if (op == &op_elu)
		elu_forward(y, x, (float)n->hp[0].f, 1.0f, len);
	else if (op == &op_selu)
		elu_forward(y, x, SELU_ALPHA, SELU_SCALE, len);
	else if (op == &op_mish)
		mish_forward(y, x, len);
}

static void act_bwd(struct dl_node *n, const struct dl_tensor *in,
		    const struct dl_tensor *out, const float *dout,
		    float *const *din, struct dl_ctx *ctx)
{
	const struct dl_op_desc *op = n->op;
	const float *x = in[0].data, *y = out->data;
	float *dx = din[0];
	int64_t len = dl_shape_numel(&in[0].shape);
	if (!dx)
		return;
	if (op == &op_relu)
		relu_backward(dx, dout, x, len);
	else if (op == &op_leaky_relu)
		leaky_relu_backward(dx, dout, x, (float)n->hp[0].f, len);
	else if (op == &op_tanh)
		tanh_backward(dx, dout, y, len);
	else if (op == &op_sigmoid)
		sigmoid_backward(dx, dout, y, len);
	else if (op == &op_gelu)
		gelu_backward(dx, dout, x, (int)n->hp[0].i, len);
	else if (op == &op_silu)
		silu_backward(dx, dout, x, len);
	else if (op == &op_softplus)
		softplus_backward(dx, dout, x, (float)n->hp[0].f,
				  (float)n->hp[1].f, len);
	else if (op == &op_relu_squared)
		relu_squared_backward(dx, dout, x, len);
	else if (op == &op_relu6)
		relu6_backward(dx, dout, x, len);
	else if (op == &op_hardswish)
		hardswish_backward(dx, dout, x, len);
	else if (op == &op_hardsigmoid)
		hardsigmoid_backward(dx, dout, x, len);
	else if (op == &op_elu)
		elu_backward(dx, dout, x, (float)n->hp[0].f, 1.0f, len);
	else if (op == &op_selu)
		elu_backward(dx, dout, x, SELU_ALPHA, SELU_SCALE, len);
	else if (op == &op_mish)
		mish_backward(dx, dout, x, len);
}

/* softmax and log_softmax: the dimension splits the input into
 * [outer, D, inner] */
static void softmax_split(const struct dl_node *n, const struct dl_shape *s,
			  int64_t *outer, int64_t *D, int64_t *inner)
{
	int dim = dl_dim_index(n->hp[0].i, s->ndim);
	*outer = dl_shape_prod(s, 0, dim);
	*D = s->d[dim];
	*inner = dl_shape_prod(s, dim + 1, s->ndim);
}

static int softmax_infer(struct dl_node *n, const struct dl_shape *in,
			 struct dl_shape *out, struct dl_error *err)
{
	char s[128];
	if (dl_dim_index(n->hp[0].i, in[0].ndim) < 0)
		return dl_node_error(err, n, 0,
			"dim %lld is out of range for the input %s (dims count the batch dimension: %d to %d)",
			(long long)n->hp[0].i, dl_shape_str(&in[0], s, sizeof s),
			-in[0].ndim, in[0].ndim - 1);
	/* over the batch, results would depend on how samples are chunked */
	if (dl_dim_index(n->hp[0].i, in[0].ndim) == 0)
		return dl_node_error(err, n, 0,
			"dim %lld is the batch dimension; normalise over a dimension of "
			"each sample (1 to %d, or negative)", (long long)n->hp[0].i,
			in[0].ndim - 1);
	return act_infer(n, in, out, err);
}

static void softmax_fwd(struct dl_node *n, const struct dl_tensor *in,
			struct dl_tensor *out, struct dl_ctx *ctx)
{
	int64_t outer, D, inner;
	softmax_split(n, &in[0].shape, &outer, &D, &inner);
	softmax_forward(out->data, in[0].data, outer, D, inner,
			n->op == &op_log_softmax);
}

static void softmax_bwd(struct dl_node *n, const struct dl_tensor *in,
			const struct dl_tensor *out, const float *dout,
			float *const *din, struct dl_ctx *ctx)
{
	int64_t outer, D, inner;
	if (!din[0])
		return;
	softmax_split(n, &in[0].shape, &outer, &D, &inner);
	softmax_backward(din[0], dout, out->data, outer, D, inner,
			 n->op == &op_log_softmax);
}

static const struct dl_hp_desc leaky_relu_hp[] = {
	{"negative_slope", DL_HP_FLOAT, "0.01", NULL, 0},
};
static const struct dl_hp_desc gelu_hp[] = {
	{"approximate", DL_HP_ENUM, "none", "none|tanh", 0},
};
static const struct dl_hp_desc softplus_hp[] = {
	{"beta", DL_HP_FLOAT, "1", NULL, 0},
	{"threshold", DL_HP_FLOAT, "20", NULL, 0},
};
static const struct dl_hp_desc elu_hp[] = {
	{"alpha", DL_HP_FLOAT, "1.0", NULL, 0},
};
static const struct dl_hp_desc softmax_hp[] = {
	{"dim", DL_HP_INT, "-1", NULL, 0},
};

/* the fields every pointwise activation shares */
#define POINTWISE_K(k) .min_in = 1, .max_in = 1, .infer = act_infer, \
	.forward = act_fwd, .backward = act_bwd, .flags = DL_OP_INPLACE_OK | (k), \
	.step = dl_step_pointwise
#define POINTWISE POINTWISE_K(0)

/* The activations a fused epilogue applies (engine/fuse.c) */
static int fuse_relu(const struct dl_node *n) { (void)n; return DL_ACT_RELU; }
static int fuse_relu6(const struct dl_node *n) { (void)n; return DL_ACT_RELU6; }
static int fuse_silu(const struct dl_node *n) { (void)n; return DL_ACT_SILU; }
static int fuse_gelu(const struct dl_node *n)
{
	return n->hp[0].i ? DL_ACT_GELU_TANH : DL_ACT_GELU;   /* approximate */
}

/* y = max(x, 0) */
static const struct dl_op_desc op_relu = {
	.name = "relu", .doc = "y = max(x, 0)", POINTWISE_K(DL_OP_KINKED),
	.fuse = DL_FUSE_ACT, .fuse_act = fuse_relu,
};

/* y = x if x > 0 else negative_slope * x */
static const struct dl_op_desc op_leaky_relu = {
	.name = "leaky_relu", .doc = "y = x if x > 0 else negative_slope * x",
	.hp = leaky_relu_hp, .n_hp = 1, POINTWISE_K(DL_OP_KINKED),
};

/* y = tanh(x) */
static const struct dl_op_desc op_tanh = {
	.name = "tanh", .doc = "y = tanh(x)", POINTWISE,
};

/* y = 1 / (1 + exp(-x)) */
static const struct dl_op_desc op_sigmoid = {
	.name = "sigmoid", .doc = "y = 1 / (1 + exp(-x))", POINTWISE,
};

/* none: y = x Phi(x) = x (1 + erf(x / sqrt 2)) / 2;
 * tanh: y = x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2 */
static const struct dl_op_desc op_gelu = {
	.name = "gelu", .doc = "y = x Phi(x) (approximate: tanh form)",
	.hp = gelu_hp, .n_hp = 1, POINTWISE,
	.fuse = DL_FUSE_ACT, .fuse_act = fuse_gelu,
};

/* y = x sigmoid(x) */
static const struct dl_op_desc op_silu = {
	.name = "silu", .doc = "y = x sigmoid(x)", POINTWISE,
	.fuse = DL_FUSE_ACT, .fuse_act = fuse_silu,
};

/* y = log(1 + exp(beta x)) / beta, or x where beta x > threshold */
static const struct dl_op_desc op_softplus = {
	.name = "softplus", .doc = "y = log(1 + exp(beta x)) / beta (x above threshold / beta)",
	.hp = softplus_hp, .n_hp = 2, POINTWISE,
};

/* y = max(x, 0)^2 (Primer) */
static const struct dl_op_desc op_relu_squared = {
	.name = "relu_squared", .doc = "y = max(x, 0)^2", POINTWISE,
};

/* Position by position unless dim is the token axis. */
static int softmax_step(struct dl_node *n, const struct dl_shape *in,
			const int *in_axis, int *out_axis, int64_t max_len,
			struct dl_error *err)
{
	int rc = dl_step_pointwise(n, in, in_axis, out_axis, max_len, err);
	return rc ? rc : dl_step_check_dim(n, in, in_axis, n->hp[0].i, 0, err);
}

/* y_i = exp(x_i - max x) / sum_j exp(x_j - max x) along dim */
static const struct dl_op_desc op_softmax = {
	.name = "softmax", .doc = "y = exp(x) / sum(exp(x)) along dim",
	.min_in = 1, .max_in = 1, .hp = softmax_hp, .n_hp = 1,
	.infer = softmax_infer, .forward = softmax_fwd, .backward = softmax_bwd,
	.flags = DL_OP_BWD_NO_INPUTS, .step = softmax_step,
};

/* y_i = x_i - max x - log sum_j exp(x_j - max x) along dim */
static const struct dl_op_desc op_log_softmax = {
	.name = "log_softmax", .doc = "y = x - log(sum(exp(x))) along dim",
	.min_in = 1, .max_in = 1, .hp = softmax_hp, .n_hp = 1,
	.infer = softmax_infer, .forward = softmax_fwd, .backward = softmax_bwd,
	.flags = DL_OP_BWD_NO_INPUTS, .step = softmax_step,
};

/* y = min(max(x, 0), 6) */
static const struct dl_op_desc op_relu6 = {
	.name = "relu6", .doc = "y = min(max(x, 0), 6)", POINTWISE_K(DL_OP_KINKED),
	.fuse = DL_FUSE_ACT, .fuse_act = fuse_relu6,
};

/* y = x relu6(x + 3) / 6 */
static const struct dl_op_desc op_hardswish = {
	.name = "hardswish", .doc = "y = x relu6(x + 3) / 6", POINTWISE_K(DL_OP_KINKED),
};

/* y = relu6(x + 3) / 6 */
static const struct dl_op_desc op_hardsigmoid = {
	.name = "hardsigmoid", .doc = "y = relu6(x + 3) / 6", POINTWISE_K(DL_OP_KINKED),
};

/* y = x if x > 0 else alpha (exp(x) - 1) */
static const struct dl_op_desc op_elu = {
	.name = "elu", .doc = "y = x if x > 0 else alpha (exp(x) - 1)",
	.hp = elu_hp, .n_hp = 1, POINTWISE_K(DL_OP_KINKED),
};

/* y = scale (x if x > 0 else alpha (exp(x) - 1)), alpha = 1.6732632...,
 * scale = 1.0507009... */
static const struct dl_op_desc op_selu = {
	.name = "selu",
	.doc = "y = 1.0507 (x if x > 0 else 1.6733 (exp(x) - 1))", POINTWISE_K(DL_OP_KINKED),
};

/* y = x tanh(softplus(x)) */
static const struct dl_op_desc op_mish = {
	.name = "mish", .doc = "y = x tanh(log(1 + exp(x)))", POINTWISE,
};

const struct dl_op_desc *const dl_ops_activation[] = {
	&op_relu, &op_leaky_relu, &op_tanh, &op_sigmoid, &op_gelu, &op_silu,
	&op_softplus, &op_relu_squared, &op_softmax, &op_log_softmax,
	&op_relu6, &op_hardswish, &op_hardsigmoid, &op_elu, &op_selu, &op_mish,
	NULL,
};
