/* Elementwise arithmetic with broadcasting: add, mul (two or more inputs),
 * sub, div (two). Batch sizes match on their own (equal, or 1); per-sample
 * shapes broadcast as NumPy's, aligned from the right, so [N, T, D] + [N, D]
 * adds a [D] vector per sample. macs: K - 1 per output element.
 * Also the unary ones (exp, log, sqrt, abs, neg, clamp, scale): one mac per
 * element. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "engine/op.h"
#include "engine/stepper.h"
#include "engine/vmath.h"
#include "ops/bcast.h"

#define PAR_MIN 32768 /* elements below which a loop stays serial */
#define BLK 1024      /* elements of a row per parallel task */

enum elt_kind { ELT_ADD, ELT_MUL, ELT_SUB, ELT_DIV };

void dl_bcast_plan(struct bcast *p, int64_t *st, const struct dl_tensor *in,
		   int K, const struct dl_shape *out)
{
	int nd = out->ndim;
	for (int k = 0; k < K; k++) {
		const struct dl_shape *s = &in[k].shape;
		int64_t *sk = st + (size_t)k * DL_MAX_DIMS, stride = 1;
		for (int i = nd - 1; i >= 0; i--) {
			int j = i == 0 ? 0 : s->ndim - (nd - i);
			int64_t size = (i == 0 || j >= 1) ? s->d[j] : 1;
			sk[i] = size == 1 ? 0 : stride;
			stride *= size;
		}
	}
	/* drop size-1 dims, merge dims that are contiguous for every input */
	int m = 0;
	for (int i = 0; i < nd; i++) {
		if (out->d[i] == 1)
			continue;
		int merge = m > 0;
		for (int k = 0; k < K && merge; k++) {
			const int64_t *sk = st + (size_t)k * DL_MAX_DIMS;
			merge = sk[m - 1] == sk[i] * out->d[i];
		}
		if (merge) {
			p->d[m - 1] *= out->d[i];
			for (int k = 0; k < K; k++)
				st[(size_t)k * DL_MAX_DIMS + m - 1] = st[(size_t)k * DL_MAX_DIMS + i];
		} else {
			p->d[m] = out->d[i];
			for (int k = 0; k < K; k++)
				st[(size_t)k * DL_MAX_DIMS + m] = st[(size_t)k * DL_MAX_DIMS + i];
			m++;
		}
	}
	if (m == 0) {
		p->d[0] = 1;
		for (int k = 0; k < K; k++)
			st[(size_t)k * DL_MAX_DIMS] = 0;
		m = 1;
	}
	p->nd = m;
	p->K = K;
	p->st = st;
	p->inner = p->d[m - 1];
	p->rows = 1;
	for (int i = 0; i < m - 1; i++)
		p->rows *= p->d[i];
}

/* Element j of row idx in input k. */
static inline float bcast_at(const struct bcast *p, const struct dl_tensor *in,
			     int k, const int64_t *idx, int64_t j)
{
	const int64_t *sk = p->st + (size_t)k * DL_MAX_DIMS;
	int64_t off = j * sk[p->nd - 1];
	for (int i = 0; i < p->nd - 1; i++)
		off += idx[i] * sk[i];
	return in[k].data[off];
}

#define ELT_LOOP(EXPR) do { \
	_Pragma("omp simd") \
	for (int64_t j = 0; j < n; j++) \
		o[j] = EXPR; \
} while (0)
#define ELT_KINDS(A, B) do { \
	switch (kind) { \
	case ELT_ADD: ELT_LOOP((A) + (B)); break; \
	case ELT_MUL: ELT_LOOP((A) * (B)); break; \
	case ELT_SUB: ELT_LOOP((A) - (B)); break; \
	case ELT_DIV: ELT_LOOP((A) / (B)); break; \
	} \
} while (0)

/* o = a op b over n elements, each of a and b walked with stride 1 or
 * broadcast (stride 0): the two-input case as loops that vectorise, with
 * the generic loop's operations in its order, so the same bits. Both are
 * read before o is written (o may be a). */
static inline __attribute__((always_inline)) void elt_row2(enum elt_kind kind,
	float *o, const float *a, int64_t sa, const float *b, int64_t sb, int64_t n)
{
	if (sa && sb)
		ELT_KINDS(a[j], b[j]);
	else if (sa) {
		float y = b[0];
		ELT_KINDS(a[j], y);
	} else {
		float x = a[0];
		ELT_KINDS(x, b[j]);
	}
}

/* out = x0 + x1 + ... | x0 * x1 * ... | x0 - x1 | x0 / x1, broadcast.
 * Every input of an element is read before the element is written, so out
 * may be in[0] (in-place). Two inputs (squeeze-excitation's x * scale
 * [N, C, 1, 1], residual adds) take elt_row2's vectorised rows: the
 * generic loop's per-element offset arithmetic was 4% of efficientnet_b0's
 * batch-32 forward. */
DL_CLONES static void elt_forward(enum elt_kind kind, float *out,
			const struct dl_tensor *in, const struct bcast *p)
{
	int64_t nblk = (p->inner + BLK - 1) / BLK, tasks = p->rows * nblk;
	const int64_t *s0 = p->st, *s1 = p->st + DL_MAX_DIMS;
	int two = p->K == 2 && (s0[p->nd - 1] == 0 || s0[p->nd - 1] == 1) &&
		  (s1[p->nd - 1] == 0 || s1[p->nd - 1] == 1) &&
		  (s0[p->nd - 1] || s1[p->nd - 1]);
#pragma omp parallel for if (p->rows * p->inner > PAR_MIN) schedule(static)
	for (int64_t t = 0; t < tasks; t++) {
		int64_t idx[DL_MAX_DIMS], r = t / nblk, j0 = t % nblk * BLK;
		int64_t j1 = j0 + BLK < p->inner ? j0 + BLK : p->inner;
		bcast_row(p, r, idx);
		float *o = out + r * p->inner;
		if (two) {
			int64_t sa = s0[p->nd - 1], sb = s1[p->nd - 1];
			const float *a = in[0].data + bcast_off(p, 0, idx, j0);
			const float *b = in[1].data + bcast_off(p, 1, idx, j0);
			elt_row2(kind, o + j0, a, sa, b, sb, j1 - j0);
			continue;
		}
		for (int64_t j = j0; j < j1; j++) {
			float v = bcast_at(p, in, 0, idx, j);
			for (int k = 1; k < p->K; k++) {
				float x = bcast_at(p, in, k, idx, j);
				switch (kind) {
				case ELT_ADD: v += x; break;
				case ELT_MUL: v *= x; break;
				case ELT_SUB: v -= x; break;
				case ELT_DIV: v /= x; break;
				}
			}
			o[j] = v;
		}
	}
}

/* The gradient of a two-input op's input k at one element, g times d out
 * / d x_k: a, b the inputs' elements there */
static inline __attribute__((always_inline)) float elt_grad2(enum elt_kind kind,
	int k, float g, float a, float b)
{
	switch (kind) {
	case ELT_ADD:
		return g;
	case ELT_SUB:
		return k == 0 ? g : -g;
	case ELT_MUL:
		return k == 0 ? g * b : g * a;
	case ELT_DIV:
		return k == 0 ? g / b : -g * a / (b * b);
	}
	return 0.0f;
}

/* d out / d x_k at element j of row idx, times g (a product of more than
 * two inputs: times every other input, in order) */
static inline float elt_grad(enum elt_kind kind, const struct dl_tensor *in,
			     const struct bcast *p, int k, const int64_t *idx,
			     int64_t j, float g)
{
	if (kind == ELT_MUL && p->K > 2) {
		for (int m = 0; m < p->K; m++)
			if (m != k)
				g *= bcast_at(p, in, m, idx, j);
		return g;
	}
	if (kind == ELT_ADD || kind == ELT_SUB)
		return elt_grad2(kind, k, g, 0.0f, 0.0f);
	return elt_grad2(kind, k, g, bcast_at(p, in, 0, idx, j), bcast_at(p, in, 1, idx, j));
}

/* Input k's gradient over one row of n elements of a two-input op, a and
 * b walked with stride 1 or broadcast (0): into dx (stride 1), or into
 * the doubles acc with stride sk (0: the whole row sums into acc[0], in
 * order, as the generic loop adds it) */
static inline __attribute__((always_inline)) void elt_row2_bwd(enum elt_kind kind,
	int k, float *dx, double *acc, int64_t sk, const float *g, const float *a,
	int64_t sa, const float *b, int64_t sb, int64_t n)
{
	if (dx) {
		#pragma omp simd
		for (int64_t j = 0; j < n; j++)
			dx[j] += elt_grad2(kind, k, g[j], a[j * sa], b[j * sb]);
	} else if (sk) {
		#pragma omp simd
		for (int64_t j = 0; j < n; j++)
			acc[j] += elt_grad2(kind, k, g[j], a[j * sa], b[j * sb]);
	} else {
		double t = acc[0];
		for (int64_t j = 0; j < n; j++)
			t += elt_grad2(kind, k, g[j], a[j * sa], b[j * sb]);
		acc[0] = t;
	}
}

/* dx_k += dout * d out / d x_k, summed over the dimensions x_k was broadcast
 * along (in acc, doubles, when it was broadcast at all). Two inputs whose
 * rows are contiguous or broadcast take elt_row2_bwd's rows, as the
 * forward takes elt_row2's: the generic loop's offset arithmetic per
 * element was 10% of efficientnet_b0's training step at batch 32 (the
 * squeeze-excitation products' backward). */
DL_CLONES static void elt_backward(enum elt_kind kind, float *dx, double *acc, int k,
			 const float *dout, const struct dl_tensor *in,
			 const struct bcast *p)
{
	int64_t nblk = (p->inner + BLK - 1) / BLK, tasks = p->rows * nblk;
	int64_t total = p->rows * p->inner, nk = dl_shape_numel(&in[k].shape);
	const int64_t *s0 = p->st, *s1 = p->st + DL_MAX_DIMS;
	int64_t sa = s0[p->nd - 1], sb = s1[p->nd - 1], sk = k == 0 ? sa : sb;
	int two = p->K == 2 && (sa == 0 || sa == 1) && (sb == 0 || sb == 1) && (sa || sb);
	if (nk == total) {
		/* not broadcast: a bijection, safe in parallel */
#pragma omp parallel for if (total > PAR_MIN) schedule(static)
		for (int64_t t = 0; t < tasks; t++) {
			int64_t idx[DL_MAX_DIMS], r = t / nblk, j0 = t % nblk * BLK;
			int64_t j1 = j0 + BLK < p->inner ? j0 + BLK : p->inner;
			bcast_row(p, r, idx);
			const float *g = dout + r * p->inner;
			if (two) {
				elt_row2_bwd(kind, k, dx + bcast_off(p, k, idx, j0), NULL, 1,
					     g + j0, in[0].data + bcast_off(p, 0, idx, j0), sa,
					     in[1].data + bcast_off(p, 1, idx, j0), sb, j1 - j0);
				continue;
			}
			for (int64_t j = j0; j < j1; j++)
				dx[bcast_off(p, k, idx, j)] +=
					elt_grad(kind, in, p, k, idx, j, g[j]);
		}
		return;
	}
	for (int64_t i = 0; i < nk; i++)
		acc[i] = 0.0;
	for (int64_t r = 0; r < p->rows; r++) {
		int64_t idx[DL_MAX_DIMS];
		bcast_row(p, r, idx);
		const float *g = dout + r * p->inner;
		if (two) {
			elt_row2_bwd(kind, k, NULL, acc + bcast_off(p, k, idx, 0), sk, g,
				     in[0].data + bcast_off(p, 0, idx, 0), sa,
				     in[1].data + bcast_off(p, 1, idx, 0), sb, p->inner);
			continue;
		}
		for (int64_t j = 0; j < p->inner; j++)
			acc[bcast_off(p, k, idx, j)] +=
				elt_grad(kind, in, p, k, idx, j, g[j]);
	}
	for (int64_t i = 0; i < nk; i++)
		dx[i] += (float)acc[i];
}

/* ---- the ops ---- */

int dl_bcast_infer(struct dl_node *n, const struct dl_shape *in,
		   struct dl_shape *out, struct dl_error *err)
{
	char s[128], t[128];
	int K = n->n_in;
	if (K < n->op->min_in || (n->op->max_in >= 0 && K > n->op->max_in))
		return dl_node_error(err, n, -1, "takes %s %d inputs, got %d",
				     n->op->max_in < 0 ? "at least" : "exactly",
				     n->op->min_in, K);
	int nd = 0, bk = 0;
	int64_t N = 1;
	for (int k = 0; k < K; k++) {
		if (in[k].ndim < 1)
			return dl_node_error(err, n, -1, "input %d has no batch dimension", k + 1);
		if (in[k].ndim > nd)
			nd = in[k].ndim;
		if (in[k].d[0] == 1)
			continue;
		if (N != 1 && in[k].d[0] != N)
			return dl_node_error(err, n, -1,
				"input %d has batch size %lld and input %d has %lld; batch sizes must be equal, or 1",
				bk + 1, (long long)N, k + 1, (long long)in[k].d[0]);
		N = in[k].d[0];
		bk = k;
	}
	struct dl_shape o;
	memset(&o, 0, sizeof o);
	o.ndim = nd;
	o.d[0] = N;
	for (int i = nd - 1; i >= 1; i--) {
		int64_t size = 1;
		int from = 0;
		for (int k = 0; k < K; k++) {
			int j = in[k].ndim - (nd - i);
			int64_t dk = j >= 1 ? in[k].d[j] : 1;
			if (dk == 1)
				continue;
			if (size != 1 && dk != size) {
				return dl_node_error(err, n, -1,
					"input %d has shape %s and input %d has shape %s: their per-sample shapes do not broadcast "
					"(aligned from the right, each dimension must be equal or 1; the batch dimension is matched on its own)",
					from + 1, dl_shape_str(&in[from], s, sizeof s), k + 1,
					dl_shape_str(&in[k], t, sizeof t));
			}
			size = dk;
			from = k;
		}
		o.d[i] = size;
	}
	int64_t numel = dl_shape_numel(&o);
	if (numel < 0)
		return dl_node_error(err, n, -1, "the output %s is too large",
				     dl_shape_str(&o, s, sizeof s));
	/* strides, then one accumulator for the largest broadcast input */
	int64_t acc = 0;
	for (int k = 0; k < K; k++) {
		int64_t nk = dl_shape_numel(&in[k]);
		if (nk != numel && nk > acc)
			acc = nk;
	}
	*out = o;
	n->ws_bytes = (size_t)K * DL_MAX_DIMS * sizeof(int64_t) +
		      (size_t)acc * sizeof(double);
	n->saved_bytes = 0;
	n->macs = (int64_t)(K - 1) * numel;
	return 0;
}

/* tentative definitions: the descriptors follow */
static const struct dl_op_desc op_mul, op_sub, op_div;

static enum elt_kind elt_kind_of(const struct dl_op_desc *op)
{
	if (op == &op_mul)
		return ELT_MUL;
	if (op == &op_sub)
		return ELT_SUB;
	if (op == &op_div)
		return ELT_DIV;
	return ELT_ADD;
}

static void elt_fwd(struct dl_node *n, const struct dl_tensor *in,
		    struct dl_tensor *out, struct dl_ctx *ctx)
{
	if (dl_shape_numel(&out->shape) == 0)
		return;
	struct bcast p;
	dl_bcast_plan(&p, ctx->ws, in, n->n_in, &out->shape);
	elt_forward(elt_kind_of(n->op), out->data, in, &p);
}

static void elt_bwd(struct dl_node *n, const struct dl_tensor *in,
		    const struct dl_tensor *out, const float *dout,
		    float *const *din, struct dl_ctx *ctx)
{
	if (dl_shape_numel(&out->shape) == 0)
		return;
	struct bcast p;
	int64_t *st = ctx->ws;
	dl_bcast_plan(&p, st, in, n->n_in, &out->shape);
	double *acc = (double *)(st + (size_t)n->n_in * DL_MAX_DIMS);
	for (int k = 0; k < n->n_in; k++)
		if (din[k])
			elt_backward(elt_kind_of(n->op), din[k], acc, k, dout, in, &p);
}

/* y = x1 + x2 + ... (broadcast) */
static const struct dl_op_desc op_add = {
	.name = "add",
	.doc = "y = x1 + x2 + ... (broadcast)",
	.min_in = 2, .max_in = -1,
	.infer = dl_bcast_infer, .forward = elt_fwd, .backward = elt_bwd,
	.step = dl_step_pointwise, .fuse = DL_FUSE_ADD,
	.flags = DL_OP_INPLACE_OK | DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

/* y = x1 * x2 * ... (broadcast) */
static const struct dl_op_desc op_mul = {
	.name = "mul",
	.doc = "y = x1 * x2 * ... (broadcast)",
	.min_in = 2, .max_in = -1,
	.infer = dl_bcast_infer, .forward = elt_fwd, .backward = elt_bwd,
	.step = dl_step_pointwise,
	.flags = DL_OP_INPLACE_OK | DL_OP_BWD_NO_OUTPUT,
};

/* y = x1 - x2 (broadcast) */
static const struct dl_op_desc op_sub = {
	.name = "sub",
	.doc = "y = x1 - x2 (broadcast)",
	.min_in = 2, .max_in = 2,
	.infer = dl_bcast_infer, .forward = elt_fwd, .backward = elt_bwd,
	.step = dl_step_pointwise,
	.flags = DL_OP_INPLACE_OK | DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

/* y = x1 / x2 (broadcast) */
static const struct dl_op_desc op_div = {
	.name = "div",
	.doc = "y = x1 / x2 (broadcast)",
	.min_in = 2, .max_in = 2,
	.infer = dl_bcast_infer, .forward = elt_fwd, .backward = elt_bwd,
	.step = dl_step_pointwise,
	.flags = DL_OP_INPLACE_OK | DL_OP_BWD_NO_OUTPUT,
};

/* ---- unary elementwise ops: exp, log, sqrt, abs, neg, clamp, scale ----
 * out, inp [n]; backward adds into dinp. Gradients follow PyTorch's
 * derivatives.yaml: exp and sqrt from the output, abs with sign(0) = 0,
 * clamp passing the gradient where min <= x <= max (bounds included). */

static void exp_forward(float *out, const float *inp, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		out[i] = expf(inp[i]);
}

static void exp_backward(float *dinp, const float *dout, const float *out,
			 int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		dinp[i] += dout[i] * out[i];
}

static void log_forward(float *out, const float *inp, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		out[i] = logf(inp[i]);
}

static void log_backward(float *dinp, const float *dout, const float *inp,
			 int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		dinp[i] += dout[i] / inp[i];
}

static void sqrt_forward(float *out, const float *inp, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		out[i] = sqrtf(inp[i]);
}

/* d sqrt = 1 / (2 y), from the output */
static void sqrt_backward(float *dinp, const float *dout, const float *out,
			  int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		dinp[i] += dout[i] / (2.0f * out[i]);
}

static void abs_forward(float *out, const float *inp, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		out[i] = fabsf(inp[i]);
}

static void abs_backward(float *dinp, const float *dout, const float *inp,
			 int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float sgn = (float)(inp[i] > 0.0f) - (float)(inp[i] < 0.0f);
		dinp[i] += dout[i] * sgn;
	}
}

/* y = factor x + shift (neg: factor -1, shift 0) */
static void scale_forward(float *out, const float *inp, float factor,
			  float shift, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		out[i] = factor * inp[i] + shift;
}

static void scale_backward(float *dinp, const float *dout, float factor,
			   int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		dinp[i] += factor * dout[i];
}

/* y = min(max(x, lo), hi); an absent bound is -inf or +inf. NaN stays NaN
 * (both comparisons are false), as torch.clamp. */
static void clamp_forward(float *out, const float *inp, float lo, float hi,
			  int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float v = inp[i] < lo ? lo : inp[i];
		out[i] = v > hi ? hi : v;
	}
}

static void clamp_backward(float *dinp, const float *dout, const float *inp,
			   float lo, float hi, int64_t n)
{
#pragma omp parallel for simd if (parallel: n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float x = inp[i], g = dout[i];
		dinp[i] += ((x >= lo) & (x <= hi)) ? g : 0.0f;
	}
}

enum { CL_MIN, CL_MAX, N_CL_HP };
enum { SC_FACTOR, SC_SHIFT, N_SC_HP };

static const struct dl_hp_desc clamp_hp[N_CL_HP] = {
	[CL_MIN] = {"min", DL_HP_FLOAT, "none", NULL, DL_HP_DERIVED},
	[CL_MAX] = {"max", DL_HP_FLOAT, "none", NULL, DL_HP_DERIVED},
};

static const struct dl_hp_desc scale_hp[N_SC_HP] = {
	[SC_FACTOR] = {"factor", DL_HP_FLOAT, "1", NULL, 0},
	[SC_SHIFT] = {"shift", DL_HP_FLOAT, "0", NULL, 0},
};

/* clamp's bounds, -inf / +inf where absent */
static void clamp_bounds(const struct dl_node *n, float *lo, float *hi)
{
	*lo = n->hp[CL_MIN].set ? (float)n->hp[CL_MIN].f : -INFINITY;
	*hi = n->hp[CL_MAX].set ? (float)n->hp[CL_MAX].f : INFINITY;
}

static const struct dl_op_desc op_exp, op_log, op_sqrt, op_abs, op_neg,
	op_clamp, op_scale;

static int unary_infer(struct dl_node *n, const struct dl_shape *in,
		       struct dl_shape *out, struct dl_error *err)
{
	if (n->op == &op_clamp) {
		const struct dl_hp_value *lo = &n->hp[CL_MIN], *hi = &n->hp[CL_MAX];
		if (!lo->set && !hi->set)
			return dl_node_error(err, n, -1,
				"needs min, max or both (as torch.clamp); an absent bound is unbounded");
		if (lo->set && hi->set && lo->f > hi->f)
			return dl_node_error(err, n, CL_MIN,
				"min %g is greater than max %g", lo->f, hi->f);
	}
	*out = in[0];
	n->ws_bytes = 0;
	n->saved_bytes = 0;
	n->macs = dl_shape_numel(&in[0]);
	return 0;
}

static void unary_fwd(struct dl_node *n, const struct dl_tensor *in,
		      struct dl_tensor *out, struct dl_ctx *ctx)
{
	const struct dl_op_desc *op = n->op;
	const float *x = in[0].data;
	float *y = out->data;
	int64_t len = dl_shape_numel(&in[0].shape);
	float lo, hi;
	if (op == &op_exp) {
		exp_forward(y, x, len);
	} else if (op == &op_log) {
		log_forward(y, x, len);
	} else if (op == &op_sqrt) {
		sqrt_forward(y, x, len);
	} else if (op == &op_abs) {
		abs_forward(y, x, len);
	} else if (op == &op_neg) {
		scale_forward(y, x, -1.0f, 0.0f, len);
	} else if (op == &op_clamp) {
		clamp_bounds(n, &lo, &hi);
		clamp_forward(y, x, lo, hi, len);
	} else if (op == &op_scale) {
		scale_forward(y, x, (float)n->hp[SC_FACTOR].f,
			      (float)n->hp[SC_SHIFT].f, len);
	}
}

static void unary_bwd(struct dl_node *n, const struct dl_tensor *in,
		      const struct dl_tensor *out, const float *dout,
		      float *const *din, struct dl_ctx *ctx)
{
	const struct dl_op_desc *op = n->op;
	float *dx = din[0];
	int64_t len = dl_shape_numel(&in[0].shape);
	float lo, hi;
	if (!dx)
		return;
	if (op == &op_exp) {
		exp_backward(dx, dout, out->data, len);
	} else if (op == &op_log) {
		log_backward(dx, dout, in[0].data, len);
	} else if (op == &op_sqrt) {
		sqrt_backward(dx, dout, out->data, len);
	} else if (op == &op_abs) {
		abs_backward(dx, dout, in[0].data, len);
	} else if (op == &op_neg) {
		scale_backward(dx, dout, -1.0f, len);
	} else if (op == &op_clamp) {
		clamp_bounds(n, &lo, &hi);
		clamp_backward(dx, dout, in[0].data, lo, hi, len);
	} else if (op == &op_scale) {
		scale_backward(dx, dout, (float)n->hp[SC_FACTOR].f, len);
	}
}

/* the fields every unary op shares */
#define UNARY .min_in = 1, .max_in = 1, .infer = unary_infer, \
	.forward = unary_fwd, .backward = unary_bwd, .step = dl_step_pointwise

/* y = exp(x) */
static const struct dl_op_desc op_exp = {
	.name = "exp", .doc = "y = exp(x)", UNARY,
	.flags = DL_OP_INPLACE_OK | DL_OP_BWD_NO_INPUTS,
};

/* y = log(x) (natural; -inf at 0, NaN below) */
static const struct dl_op_desc op_log = {
	.name = "log", .doc = "y = log(x), natural", UNARY,
	.flags = DL_OP_INPLACE_OK | DL_OP_BWD_NO_OUTPUT,
};

/* y = sqrt(x) (NaN below 0) */
static const struct dl_op_desc op_sqrt = {
	.name = "sqrt", .doc = "y = sqrt(x)", UNARY,
	.flags = DL_OP_INPLACE_OK | DL_OP_BWD_NO_INPUTS,
};

/* y = |x|; dy/dx = sign(x), 0 at 0 */
static const struct dl_op_desc op_abs = {
	.name = "abs", .doc = "y = |x|", UNARY,
	.flags = DL_OP_INPLACE_OK | DL_OP_BWD_NO_OUTPUT | DL_OP_KINKED,
};

/* y = -x */
static const struct dl_op_desc op_neg = {
	.name = "neg", .doc = "y = -x", UNARY,
	.flags = DL_OP_INPLACE_OK | DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

/* y = min(max(x, min), max), either bound optional; the gradient passes
 * where min <= x <= max */
static const struct dl_op_desc op_clamp = {
	.name = "clamp", .doc = "y = min(max(x, min), max); an absent bound is unbounded",
	.hp = clamp_hp, .n_hp = N_CL_HP, UNARY,
	.flags = DL_OP_INPLACE_OK | DL_OP_BWD_NO_OUTPUT | DL_OP_KINKED,
};

/* y = factor x + shift */
static const struct dl_op_desc op_scale = {
	.name = "scale", .doc = "y = factor x + shift",
	.hp = scale_hp, .n_hp = N_SC_HP, UNARY,
	.flags = DL_OP_INPLACE_OK | DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

const struct dl_op_desc *const dl_ops_elementwise[] = {
	&op_add, &op_mul, &op_sub, &op_div, &op_exp, &op_log, &op_sqrt, &op_abs,
	&op_neg, &op_clamp, &op_scale, NULL,
};
