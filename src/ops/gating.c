/* Gating: highway (a gated mix of a transform and the identity),
 * spatial_gating (gMLP's spatial gating unit) and graph_conv (Kipf and
 * Welling's normalised graph convolution). Backward recomputes the gate
 * values from the inputs in scratch, so nothing is saved across the step. */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "engine/gemm.h"
#include "engine/op.h"
#include "engine/stepper.h"

static float *param_data(const struct dl_node *n, const char *name)
{
	int k = dl_node_find_param(n, name);
	return k < 0 ? NULL : n->params[k].data;
}

static float *param_grad(const struct dl_node *n, const char *name)
{
	int k = dl_node_find_param(n, name);
	return k < 0 ? NULL : n->params[k].grad;
}

/* dbias[O] += column sums of g[M, O], in double (acc[O]) */
static void add_colsums(float *dbias, const float *g, double *acc, int64_t M,
			int64_t O)
{
	for (int64_t j = 0; j < O; j++)
		acc[j] = 0.0;
	for (int64_t m = 0; m < M; m++)
		for (int64_t j = 0; j < O; j++)
			acc[j] += g[m * O + j];
	for (int64_t j = 0; j < O; j++)
		dbias[j] += (float)acc[j];
}

/* ---- highway ---- */

enum { HW_ACT, N_HW_HP };
enum { ACT_RELU, ACT_TANH, ACT_SIGMOID, ACT_GELU, ACT_SILU, ACT_IDENTITY };

static const struct dl_hp_desc hw_hp[N_HW_HP] = {
	[HW_ACT] = {"activation", DL_HP_ENUM, "relu",
		    "relu|tanh|sigmoid|gelu|silu|identity", 0},
};

static double sigm(double x)
{
	return 1.0 / (1.0 + exp(-x));
}

/* the activation and its derivative at x (gelu: the exact, erf form) */
static double act_f(int act, double x)
{
	switch (act) {
	case ACT_RELU: return x > 0 ? x : 0;
	case ACT_TANH: return tanh(x);
	case ACT_SIGMOID: return sigm(x);
	case ACT_GELU: return 0.5 * x * (1.0 + erf(x * M_SQRT1_2));
	case ACT_SILU: return x * sigm(x);
	default: return x;
	}
}

static double act_df(int act, double x)
{
	switch (act) {
	case ACT_RELU: return x > 0 ? 1 : 0;
	case ACT_TANH: { double t = tanh(x); return 1 - t * t; }
	case ACT_SIGMOID: { double s = sigm(x); return s * (1 - s); }
	case ACT_GELU:
		return 0.5 * (1.0 + erf(x * M_SQRT1_2)) +
		       x * exp(-0.5 * x * x) * 0.3989422804014327;
	case ACT_SILU: { double s = sigm(x); return s * (1 + x * (1 - s)); }
	default: return 1;
	}
}

/* hpre[M, D] = x Wt^T + bt, gpre[M, D] = x Wg^T + bg */
static void highway_pre(float *hpre, float *gpre, const float *x,
			const float *wt, const float *bt, const float *wg,
			const float *bg, int M, int D)
{
	dl_sgemm(0, 1, M, D, D, 1.0f, x, D, wt, D, 0.0f, hpre, D);
	dl_sgemm(0, 1, M, D, D, 1.0f, x, D, wg, D, 0.0f, gpre, D);
	for (int64_t m = 0; m < M; m++)
		for (int j = 0; j < D; j++) {
			hpre[m * D + j] += bt[j];
			gpre[m * D + j] += bg[j];
		}
}

/* out[M, D] = act(hpre) T + x (1 - T), T = sigmoid(gpre) */
static void highway_forward(float *out, const float *x, const float *hpre,
			    const float *gpre, int act, int64_t MD)
{
	for (int64_t i = 0; i < MD; i++) {
		double t = sigm(gpre[i]);
		out[i] = (float)(act_f(act, hpre[i]) * t + x[i] * (1 - t));
	}
}

/* dhpre = dout T act'(hpre), dgpre = dout (H - x) T (1 - T), in place over
 * hpre and gpre; dx += dout (1 - T) + dhpre Wt + dgpre Wg; weights' and
 * biases' gradients as two linears */
static void highway_backward(float *dx, float *dwt, float *dbt, float *dwg,
			     float *dbg, const float *dout, const float *x,
			     float *hpre, float *gpre, const float *wt,
			     const float *wg, double *acc, int act, int M,
			     int D)
{
	int64_t MD = (int64_t)M * D;
	for (int64_t i = 0; i < MD; i++) {
		double t = sigm(gpre[i]), h = act_f(act, hpre[i]);
		if (dx)
			dx[i] += (float)(dout[i] * (1 - t));
		gpre[i] = (float)(dout[i] * (h - x[i]) * t * (1 - t));
		hpre[i] = (float)(dout[i] * t * act_df(act, hpre[i]));
	}
	if (dx) {
		dl_sgemm(0, 0, M, D, D, 1.0f, hpre, D, wt, D, 1.0f, dx, D);
		dl_sgemm(0, 0, M, D, D, 1.0f, gpre, D, wg, D, 1.0f, dx, D);
	}
	if (dwt)
		dl_sgemm(1, 0, D, D, M, 1.0f, hpre, D, x, D, 1.0f, dwt, D);
	if (dwg)
		dl_sgemm(1, 0, D, D, M, 1.0f, gpre, D, x, D, 1.0f, dwg, D);
	if (dbt)
		add_colsums(dbt, hpre, acc, M, D);
	if (dbg)
		add_colsums(dbg, gpre, acc, M, D);
}

static int hw_infer(struct dl_node *n, const struct dl_shape *in,
		    struct dl_shape *out, struct dl_error *err)
{
	char s[128];
	const struct dl_shape *x = &in[0];
	if (x->ndim < 2 || x->d[x->ndim - 1] <= 0)
		return dl_node_error(err, n, -1,
			"the input has shape %s; highway needs features per sample ([N, ..., D])",
			dl_shape_str(x, s, sizeof s));
	int64_t D = x->d[x->ndim - 1];
	int64_t M = dl_shape_prod(x, 0, x->ndim - 1);
	if (D > INT_MAX || M > INT_MAX ||
	    2.0 * (double)M * (double)D > (double)DL_MAX_NUMEL)
		return dl_node_error(err, n, -1, "the input %s is too large",
				     dl_shape_str(x, s, sizeof s));
	double bound = 1.0 / sqrt((double)D);
	int64_t wd[2] = {D, D};
	struct dl_shape ws = dl_shape_make(2, wd), bs = dl_shape_make(1, &D);
	int rc;
	if ((rc = dl_node_param(n, "transform.weight", &ws, DL_INIT_UNIFORM, bound, err)) < 0 ||
	    (rc = dl_node_param(n, "transform.bias", &bs, DL_INIT_UNIFORM, bound, err)) < 0 ||
	    (rc = dl_node_param(n, "gate.weight", &ws, DL_INIT_UNIFORM, bound, err)) < 0 ||
	    (rc = dl_node_param(n, "gate.bias", &bs, DL_INIT_CONST, -1.0, err)) < 0)
		return rc;
	*out = *x;
	n->ws_bytes = 2 * (size_t)(M * D) * sizeof(float) + (size_t)D * sizeof(double);
	n->saved_bytes = 0;
	n->macs = 2 * M * D * D;
	return 0;
}

static void hw_fwd(struct dl_node *n, const struct dl_tensor *in,
		   struct dl_tensor *out, struct dl_ctx *ctx)
{
	const struct dl_shape *x = &in[0].shape;
	int D = (int)x->d[x->ndim - 1];
	int M = (int)dl_shape_prod(x, 0, x->ndim - 1);
	float *hpre = ctx->ws, *gpre = hpre + (int64_t)M * D;
	highway_pre(hpre, gpre, in[0].data, param_data(n, "transform.weight"),
		    param_data(n, "transform.bias"), param_data(n, "gate.weight"),
		    param_data(n, "gate.bias"), M, D);
	highway_forward(out->data, in[0].data, hpre, gpre, (int)n->hp[HW_ACT].i,
			(int64_t)M * D);
}

static void hw_bwd(struct dl_node *n, const struct dl_tensor *in,
		   const struct dl_tensor *out, const float *dout,
		   float *const *din, struct dl_ctx *ctx)
{
	const struct dl_shape *x = &in[0].shape;
	int D = (int)x->d[x->ndim - 1];
	int M = (int)dl_shape_prod(x, 0, x->ndim - 1);
	float *hpre = ctx->ws, *gpre = hpre + (int64_t)M * D;
	double *acc = (double *)(gpre + (int64_t)M * D);
	const float *wt = param_data(n, "transform.weight");
	const float *wg = param_data(n, "gate.weight");
	highway_pre(hpre, gpre, in[0].data, wt, param_data(n, "transform.bias"),
		    wg, param_data(n, "gate.bias"), M, D);
	highway_backward(din[0], param_grad(n, "transform.weight"),
			 param_grad(n, "transform.bias"),
			 param_grad(n, "gate.weight"), param_grad(n, "gate.bias"),
			 dout, in[0].data, hpre, gpre, wt, wg, acc,
			 (int)n->hp[HW_ACT].i, M, D);
}

/* y = H(x) T(x) + x (1 - T(x)), H = activation(x Wt^T + bt), T =
 * sigmoid(x Wg^T + bg) over the last dimension; W ~ U(+-1/sqrt(D)) as
 * linear, bt too, bg = -1 (towards the identity) */
static const struct dl_op_desc op_highway = {
	.name = "highway",
	.doc = "y = H(x) T(x) + x (1 - T(x)), H = act(linear), T = sigmoid(linear)",
	.min_in = 1, .max_in = 1,
	.hp = hw_hp, .n_hp = N_HW_HP,
	.infer = hw_infer,
	.forward = hw_fwd,
	.backward = hw_bwd,
	.params = "transform.weight [D, D], transform.bias [D], gate.weight [D, D], gate.bias [D]",
	.flags = DL_OP_BWD_NO_OUTPUT,
	.step = dl_step_rows,
};

/* ---- spatial gating ---- */

enum { SG_NORM, N_SG_HP };

static const struct dl_hp_desc sg_hp[N_SG_HP] = {
	[SG_NORM] = {"norm", DL_HP_BOOL, "false", NULL, 0},
};

#define SG_EPS 1e-5

/* zn[R, C] = layer_norm(z2 rows, stride ldz) * w + b; mean, rstd [R] */
static void sg_norm_forward(float *zn, float *mean, float *rstd,
			    const float *z2, int64_t ldz, const float *w,
			    const float *b, int64_t R, int64_t C)
{
	for (int64_t r = 0; r < R; r++) {
		const float *x = z2 + r * ldz;
		double s = 0, v = 0;
		for (int64_t c = 0; c < C; c++)
			s += x[c];
		double mu = s / (double)C;
		for (int64_t c = 0; c < C; c++)
			v += (x[c] - mu) * (x[c] - mu);
		double rs = 1.0 / sqrt(v / (double)C + SG_EPS);
		mean[r] = (float)mu;
		rstd[r] = (float)rs;
		for (int64_t c = 0; c < C; c++)
			zn[r * C + c] = (float)((x[c] - mu) * rs * w[c] + b[c]);
	}
}

/* dz2 (rows of stride ldz) += rstd (dxhat - mean(dxhat) - xhat
 * mean(dxhat xhat)), dxhat = dzn w; dw += dzn xhat; db += dzn */
static void sg_norm_backward(float *dz2, int64_t ldz, float *dw, float *db,
			     const float *dzn, const float *z2,
			     const float *w, const float *mean,
			     const float *rstd, int64_t R, int64_t C)
{
	for (int64_t r = 0; r < R; r++) {
		const float *x = z2 + r * ldz, *g = dzn + r * C;
		double a = 0, bsum = 0;
		for (int64_t c = 0; c < C; c++) {
			double xh = (x[c] - mean[r]) * (double)rstd[r];
			double dxh = (double)g[c] * w[c];
			a += dxh;
			bsum += dxh * xh;
			if (dw)
				dw[c] += (float)(g[c] * xh);
			if (db)
				db[c] += g[c];
		}
		a /= (double)C;
		bsum /= (double)C;
		if (!dz2)
			continue;
		float *d = dz2 + r * ldz;
		for (int64_t c = 0; c < C; c++) {
			double xh = (x[c] - mean[r]) * (double)rstd[r];
			d[c] += (float)(rstd[r] * ((double)g[c] * w[c] - a - xh * bsum));
		}
	}
}

/* f[n] [T, C] = W [T, T] z2[n] [T, C] + b[t]; z2 rows of stride ldz */
static void sg_proj(float *f, const float *z2, int64_t ldz, const float *w,
		    const float *b, int N, int T, int C)
{
	for (int n = 0; n < N; n++) {
		float *fn = f + (int64_t)n * T * C;
		dl_sgemm(0, 0, T, C, T, 1.0f, w, T, z2 + (int64_t)n * T * ldz,
			 (int)ldz, 0.0f, fn, C);
		for (int t = 0; t < T; t++)
			for (int c = 0; c < C; c++)
				fn[(int64_t)t * C + c] += b[t];
	}
}

/* Scratch of spatial gating: zn and dzn [N, T, C] (norm only), f [N, T, C],
 * mean, rstd [N, T] (norm only), acc [T] (double). */
struct sg_ws {
	float *zn, *dzn, *f, *mean, *rstd;
	double *acc;
};

static struct sg_ws sg_ws_split(void *ws, int norm, int64_t N, int64_t T,
				int64_t C)
{
	struct sg_ws s = {0};
	double *acc = ws;
	float *p = (float *)(acc + T);
	s.acc = acc;
	s.f = p;
	p += N * T * C;
	if (norm) {
		s.zn = p;
		p += N * T * C;
		s.dzn = p;
		p += N * T * C;
		s.mean = p;
		p += N * T;
		s.rstd = p;
	}
	return s;
}

static int sg_infer(struct dl_node *n, const struct dl_shape *in,
		    struct dl_shape *out, struct dl_error *err)
{
	char s[128];
	const struct dl_shape *x = &in[0];
	if (x->ndim != 3)
		return dl_node_error(err, n, -1,
			"the input has shape %s; spatial_gating needs a sequence [N, T, 2C]",
			dl_shape_str(x, s, sizeof s));
	int64_t N = x->d[0], T = x->d[1], C2 = x->d[2];
	if (C2 % 2 != 0 || C2 == 0)
		return dl_node_error(err, n, -1,
			"the input %s has %lld channels; spatial_gating splits them in two halves, so it needs an even, positive number",
			dl_shape_str(x, s, sizeof s), (long long)C2);
	if (T <= 0)
		return dl_node_error(err, n, -1,
			"the input %s has no positions", dl_shape_str(x, s, sizeof s));
	int64_t C = C2 / 2;
	if (T > INT_MAX || C2 > INT_MAX || N > INT_MAX ||
	    4.0 * (double)N * (double)T * (double)C > (double)DL_MAX_NUMEL)
		return dl_node_error(err, n, -1, "the input %s is too large",
				     dl_shape_str(x, s, sizeof s));
	int64_t wd[2] = {T, T};
	struct dl_shape ws = dl_shape_make(2, wd), bs = dl_shape_make(1, &T);
	struct dl_shape cs = dl_shape_make(1, &C);
	int rc;
	if ((rc = dl_node_param(n, "weight", &ws, DL_INIT_UNIFORM, 0.01, err)) < 0 ||
	    (rc = dl_node_param(n, "bias", &bs, DL_INIT_ONES, 0.0, err)) < 0)
		return rc;
	int norm = (int)n->hp[SG_NORM].i;
	if (norm &&
	    ((rc = dl_node_param(n, "norm.weight", &cs, DL_INIT_ONES, 0.0, err)) < 0 ||
	     (rc = dl_node_param(n, "norm.bias", &cs, DL_INIT_ZEROS, 0.0, err)) < 0))
		return rc;
	*out = *x;
	out->d[2] = C;
	n->ws_bytes = (size_t)T * sizeof(double) +
		      (size_t)(N * T * C * (norm ? 3 : 1) + (norm ? 2 * N * T : 0)) *
			      sizeof(float);
	n->saved_bytes = 0;
	n->macs = N * T * T * C + N * T * C;
	return 0;
}

static void sg_fwd(struct dl_node *n, const struct dl_tensor *in,
		   struct dl_tensor *out, struct dl_ctx *ctx)
{
	const struct dl_shape *x = &in[0].shape;
	int N = (int)x->d[0], T = (int)x->d[1], C = (int)(x->d[2] / 2);
	int norm = (int)n->hp[SG_NORM].i;
	struct sg_ws s = sg_ws_split(ctx->ws, norm, N, T, C);
	const float *z = in[0].data, *z2 = z + C;
	int64_t ld = 2 * (int64_t)C;
	if (norm) {
		sg_norm_forward(s.zn, s.mean, s.rstd, z2, ld,
				param_data(n, "norm.weight"),
				param_data(n, "norm.bias"), (int64_t)N * T, C);
		z2 = s.zn;
		ld = C;
	}
	sg_proj(s.f, z2, ld, param_data(n, "weight"), param_data(n, "bias"), N,
		T, C);
	int64_t R = (int64_t)N * T;
	for (int64_t r = 0; r < R; r++)
		for (int c = 0; c < C; c++)
			out->data[r * C + c] = z[r * 2 * C + c] * s.f[r * C + c];
}

/* dZ1 = dout f(Z2); df = dout Z1; dW += df Z2n^T; db[t] += sum df[t];
 * dZ2n = W^T df, then through the norm */
static void sg_bwd(struct dl_node *n, const struct dl_tensor *in,
		   const struct dl_tensor *out, const float *dout,
		   float *const *din, struct dl_ctx *ctx)
{
	const struct dl_shape *x = &in[0].shape;
	int N = (int)x->d[0], T = (int)x->d[1], C = (int)(x->d[2] / 2);
	int norm = (int)n->hp[SG_NORM].i;
	struct sg_ws s = sg_ws_split(ctx->ws, norm, N, T, C);
	const float *z = in[0].data, *z2 = z + C;
	const float *w = param_data(n, "weight");
	int64_t ld = 2 * (int64_t)C, R = (int64_t)N * T;
	if (norm) {
		sg_norm_forward(s.zn, s.mean, s.rstd, z2, ld,
				param_data(n, "norm.weight"),
				param_data(n, "norm.bias"), R, C);
		z2 = s.zn;
		ld = C;
	}
	sg_proj(s.f, z2, ld, w, param_data(n, "bias"), N, T, C);
	float *dz = din[0];
	/* dZ1, and f becomes df */
	for (int64_t r = 0; r < R; r++)
		for (int c = 0; c < C; c++) {
			float g = dout[r * C + c];
			if (dz)
				dz[r * 2 * C + c] += g * s.f[r * C + c];
			s.f[r * C + c] = g * z[r * 2 * C + c];
		}
	float *dw = param_grad(n, "weight"), *db = param_grad(n, "bias");
	for (int i = 0; i < N; i++) {
		const float *df = s.f + (int64_t)i * T * C;
		if (dw)
			dl_sgemm(0, 1, T, T, C, 1.0f, df, C,
				 z2 + (int64_t)i * T * ld, (int)ld, 1.0f, dw, T);
	}
	if (db) {
		for (int t = 0; t < T; t++)
			s.acc[t] = 0;
		for (int64_t r = 0; r < R; r++)
			for (int c = 0; c < C; c++)
				s.acc[r % T] += s.f[r * C + c];
		for (int t = 0; t < T; t++)
			db[t] += (float)s.acc[t];
	}
	if (!norm) {
		if (dz)
			for (int i = 0; i < N; i++)
				dl_sgemm(1, 0, T, C, T, 1.0f, w, T,
					 s.f + (int64_t)i * T * C, C, 1.0f,
					 dz + (int64_t)i * T * 2 * C + C, 2 * C);
		return;
	}
	float *dnw = param_grad(n, "norm.weight"), *dnb = param_grad(n, "norm.bias");
	if (!dz && !dnw && !dnb)
		return;
	for (int i = 0; i < N; i++)
		dl_sgemm(1, 0, T, C, T, 1.0f, w, T, s.f + (int64_t)i * T * C, C,
			 0.0f, s.dzn + (int64_t)i * T * C, C);
	sg_norm_backward(dz ? dz + C : NULL, 2 * (int64_t)C, dnw, dnb, s.dzn,
			 z + C, param_data(n, "norm.weight"), s.mean, s.rstd, R,
			 C);
}

/* gMLP: Z [N, T, 2C] = [Z1, Z2] on the last dimension; y = Z1 * (W Z2' + b)
 * with W [T, T] ~ U(+-0.01) and b [T] = 1 mixing positions, Z2' = Z2 or
 * layer_norm(Z2) (norm.weight, norm.bias [C]) */
static const struct dl_op_desc op_spatial_gating = {
	.name = "spatial_gating",
	.doc = "y = Z1 * (W Z2 + b) over the sequence, Z [N, T, 2C] = [Z1, Z2]",
	.min_in = 1, .max_in = 1,
	.hp = sg_hp, .n_hp = N_SG_HP,
	.infer = sg_infer,
	.forward = sg_fwd,
	.backward = sg_bwd,
	.params = "weight [T, T], bias [T], norm.weight [C], norm.bias [C] (norm: true)",
	.flags = DL_OP_BWD_NO_OUTPUT,
};

/* ---- graph convolution ---- */

enum { GC_OUT, GC_BIAS, N_GC_HP };

static const struct dl_hp_desc gc_hp[N_GC_HP] = {
	[GC_OUT] = {"out_features", DL_HP_INT, NULL, NULL,
		    DL_HP_REQUIRED | DL_HP_POSITIVE},
	[GC_BIAS] = {"bias", DL_HP_BOOL, "true", NULL, 0},
};

/* ahat[V, V] = S (A + I) S, S = diag(deg^-1/2), deg the row sums of A + I
 * (in double); a degree <= 0 gets s = 0, as PyTorch Geometric's gcn_norm */
static void gc_normalise(float *ahat, float *s, const float *a, int V)
{
	for (int i = 0; i < V; i++) {
		double d = 1;
		for (int j = 0; j < V; j++)
			d += a[(int64_t)i * V + j];
		s[i] = d > 0 ? (float)(1.0 / sqrt(d)) : 0.0f;
	}
	for (int i = 0; i < V; i++)
		for (int j = 0; j < V; j++) {
			double b = a[(int64_t)i * V + j] + (i == j);
			ahat[(int64_t)i * V + j] = (float)(s[i] * b * s[j]);
		}
}

/* Scratch: xw and dxw [N, L, V, O], ahat and dahat [V, V], s [V], acc
 * [O]. */
struct gc_ws {
	double *acc;
	float *xw, *dxw, *ahat, *dahat, *s;
};

static struct gc_ws gc_ws_split(void *ws, int64_t NLV, int64_t V, int64_t O)
{
	struct gc_ws g;
	g.acc = ws;
	g.xw = (float *)(g.acc + O);
	g.dxw = g.xw + NLV * O;
	g.ahat = g.dxw + NLV * O;
	g.dahat = g.ahat + V * V;
	g.s = g.dahat + V * V;
	return g;
}

/* The sizes of x [N, ..., V, F]: L the product of the dimensions between
 * the batch and the nodes (time steps, ...), which share the sample's
 * adjacency. */
struct gc_dims {
	int N, L, V, F, O;
	int64_t sa;  /* elements between two samples' adjacencies: 0 shared */
};

static struct gc_dims gc_dims_of(const struct dl_node *n,
				 const struct dl_tensor *in)
{
	const struct dl_shape *x = &in[0].shape;
	struct gc_dims d;
	d.N = (int)x->d[0];
	d.L = (int)dl_shape_prod(x, 1, x->ndim - 2);
	d.V = (int)x->d[x->ndim - 2];
	d.F = (int)x->d[x->ndim - 1];
	d.O = (int)n->hp[GC_OUT].i;
	d.sa = in[1].shape.d[0] == 1 ? 0 : (int64_t)d.V * d.V;
	return d;
}

static int gc_infer(struct dl_node *n, const struct dl_shape *in,
		    struct dl_shape *out, struct dl_error *err)
{
	char s[128], t[128];
	const struct dl_shape *x = &in[0], *a = &in[1];
	if (x->ndim < 3 || x->d[x->ndim - 1] <= 0)
		return dl_node_error(err, n, -1,
			"the first input has shape %s; graph_conv needs node features [N, V, F] or [N, ..., V, F]",
			dl_shape_str(x, s, sizeof s));
	int64_t N = x->d[0], V = x->d[x->ndim - 2], F = x->d[x->ndim - 1];
	int64_t L = dl_shape_prod(x, 1, x->ndim - 2), O = n->hp[GC_OUT].i;
	if (a->ndim != 3 || a->d[1] != V || a->d[2] != V ||
	    (a->d[0] != N && a->d[0] != 1))
		return dl_node_error(err, n, -1,
			"the adjacency input has shape %s; with node features %s it must be [%lld, %lld, %lld] (or batch 1, shared)",
			dl_shape_str(a, s, sizeof s), dl_shape_str(x, t, sizeof t),
			(long long)N, (long long)V, (long long)V);
	int64_t NLV = N * L * V;
	if (N > INT_MAX || L > INT_MAX || V > INT_MAX || F > INT_MAX ||
	    O > INT_MAX || NLV > INT_MAX ||
	    (double)NLV * (double)(F > O ? F : O) > (double)DL_MAX_NUMEL ||
	    (double)V * (double)V > (double)DL_MAX_NUMEL / 4)
		return dl_node_error(err, n, -1, "the input %s is too large",
				     dl_shape_str(x, s, sizeof s));
	double bound = 1.0 / sqrt((double)F);
	int64_t wd[2] = {O, F};
	struct dl_shape ws = dl_shape_make(2, wd), bs = dl_shape_make(1, &O);
	int rc = dl_node_param(n, "weight", &ws, DL_INIT_UNIFORM, bound, err);
	if (rc < 0)
		return rc;
	if (n->hp[GC_BIAS].i &&
	    (rc = dl_node_param(n, "bias", &bs, DL_INIT_UNIFORM, bound, err)) < 0)
		return rc;
	*out = *x;
	out->d[x->ndim - 1] = O;
	n->ws_bytes = (size_t)O * sizeof(double) +
		      (size_t)(2 * NLV * O + 2 * V * V + V) * sizeof(float);
	n->saved_bytes = 0;
	n->macs = NLV * F * O + NLV * V * O;
	return 0;
}

static void gc_fwd(struct dl_node *n, const struct dl_tensor *in,
		   struct dl_tensor *out, struct dl_ctx *ctx)
{
	struct gc_dims d = gc_dims_of(n, in);
	int V = d.V, O = d.O;
	int64_t VO = (int64_t)V * O;
	struct gc_ws g = gc_ws_split(ctx->ws, (int64_t)d.N * d.L * V, V, O);
	const float *b = param_data(n, "bias");
	/* X W^T for every node of every sample at once */
	dl_sgemm(0, 1, d.N * d.L * V, O, d.F, 1.0f, in[0].data, d.F,
		 param_data(n, "weight"), d.F, 0.0f, g.xw, O);
	for (int i = 0; i < d.N; i++) {
		if (i == 0 || d.sa)  /* a shared adjacency is normalised once */
			gc_normalise(g.ahat, g.s, in[1].data + i * d.sa, V);
		for (int l = 0; l < d.L; l++) {
			int64_t off = ((int64_t)i * d.L + l) * VO;
			float *y = out->data + off;
			dl_sgemm(0, 0, V, O, V, 1.0f, g.ahat, V, g.xw + off, O, 0.0f,
				 y, O);
			if (b)
				for (int v = 0; v < V; v++)
					for (int o = 0; o < O; o++)
						y[(int64_t)v * O + o] += b[o];
		}
	}
}

/* dA += the gradient of the adjacency A[V, V] given dAhat, the gradient of
 * Ahat = S (A + I) S: dA_ij = dAhat_ij s_i s_j - s_i^2 / 2 (rowsum_i +
 * colsum_i of dAhat * Ahat), the second term from the degree (ds_i/ddeg_i
 * = -s_i^3 / 2, ddeg_i/dA_ij = 1). */
static void gc_adj_backward(float *da, const float *dahat, const float *ahat,
			    const float *s, int V)
{
	for (int p = 0; p < V; p++) {
		double r = 0, c = 0;
		for (int q = 0; q < V; q++) {
			r += (double)dahat[(int64_t)p * V + q] * ahat[(int64_t)p * V + q];
			c += (double)dahat[(int64_t)q * V + p] * ahat[(int64_t)q * V + p];
		}
		double deg_term = -0.5 * (double)s[p] * s[p] * (r + c);
		for (int q = 0; q < V; q++)
			da[(int64_t)p * V + q] += (float)(
				(double)dahat[(int64_t)p * V + q] * s[p] * s[q] +
				deg_term);
	}
}

/* Per sample and slice l: dXW = Ahat^T dY; dAhat = sum over the slices
 * (and, for a shared adjacency, the samples) of dY XW^T, then through the
 * normalisation (gc_adj_backward). Then dX += dXW W, dW += dXW^T X, db +=
 * column sums of dY. */
static void gc_bwd(struct dl_node *n, const struct dl_tensor *in,
		   const struct dl_tensor *out, const float *dout,
		   float *const *din, struct dl_ctx *ctx)
{
	struct gc_dims d = gc_dims_of(n, in);
	int V = d.V, O = d.O, F = d.F;
	int64_t VO = (int64_t)V * O, NLV = (int64_t)d.N * d.L * V;
	struct gc_ws g = gc_ws_split(ctx->ws, NLV, V, O);
	const float *w = param_data(n, "weight");
	float *dw = param_grad(n, "weight"), *db = param_grad(n, "bias");
	float *dx = din[0], *da = din[1];
	dl_sgemm(0, 1, (int)NLV, O, F, 1.0f, in[0].data, F, w, F, 0.0f, g.xw, O);
	for (int i = 0; i < d.N; i++) {
		int first = i == 0 || d.sa, last = i == d.N - 1 || d.sa;
		if (first)
			gc_normalise(g.ahat, g.s, in[1].data + i * d.sa, V);
		for (int l = 0; l < d.L; l++) {
			int64_t off = ((int64_t)i * d.L + l) * VO;
			dl_sgemm(1, 0, V, O, V, 1.0f, g.ahat, V, dout + off, O, 0.0f,
				 g.dxw + off, O);
			if (da)
				dl_sgemm(0, 1, V, V, O, 1.0f, dout + off, O, g.xw + off,
					 O, first && l == 0 ? 0.0f : 1.0f, g.dahat, V);
		}
		if (da && last && d.L > 0)
			gc_adj_backward(da + i * d.sa, g.dahat, g.ahat, g.s, V);
	}
	if (dx)
		dl_sgemm(0, 0, (int)NLV, F, O, 1.0f, g.dxw, O, w, F, 1.0f, dx, F);
	if (dw)
		dl_sgemm(1, 0, O, F, (int)NLV, 1.0f, g.dxw, O, in[0].data, F, 1.0f,
			 dw, F);
	if (db)
		add_colsums(db, dout, g.acc, NLV, O);
}

/* Kipf and Welling: Y = D^-1/2 (A + I) D^-1/2 X W^T + b per sample, x [N,
 * V, F] or [N, ..., V, F] (the leading dimensions, such as time, share the
 * sample's graph), adj [N, V, V] (or [1, V, V], shared by every sample), D
 * = diag of the row sums of A + I; W [out_features, F] and b as linear */
static const struct dl_op_desc op_graph_conv = {
	.name = "graph_conv",
	.doc = "Y = D^-1/2 (A + I) D^-1/2 X W^T + b, in: [x [N, ..., V, F], adj [N, V, V]]",
	.min_in = 2, .max_in = 2,
	.hp = gc_hp, .n_hp = N_GC_HP,
	.infer = gc_infer,
	.forward = gc_fwd,
	.backward = gc_bwd,
	.params = "weight [out_features, F], bias [out_features]",
	.flags = DL_OP_BWD_NO_OUTPUT | DL_OP_ADJACENCY,
};

const struct dl_op_desc *const dl_ops_gating[] = {
	&op_highway, &op_spatial_gating, &op_graph_conv, NULL,
};
