/* Reductions over one or more per-sample dimensions (the batch dimension
 * stays): mean, sum, max, min (torch.amax and torch.amin) and argmax. Sums
 * run in double. macs: one per input element. */
#include <stddef.h>
#include <string.h>

#include "engine/op.h"

#define PAR_MIN 32768 /* elements below which a loop stays serial */

/* Dims d[0..n) with strides st, as a walk: the offset of element q. */
static int64_t walk_offset(int64_t q, int n, const int64_t *d,
			   const int64_t *st)
{
	int64_t off = 0;
	for (int i = n - 1; i >= 0; i--) {
		off += q % d[i] * st[i];
		q /= d[i];
	}
	return off;
}

/* An input seen as kept dims (K outputs) times reduced dims (R elements
 * each): output o reads inp[koff(o) + roff(r)], r in row-major order of
 * the reduced dims; the last reduced dim is the inner loop (inner cells
 * of stride s, rows of them). */
struct walk {
	int nk, nr;
	int64_t kd[DL_MAX_DIMS], kst[DL_MAX_DIMS];
	int64_t rd[DL_MAX_DIMS], rst[DL_MAX_DIMS];
	int64_t K, R, inner, rows, s;
};

static void walk_sizes(struct walk *w)
{
	w->K = w->R = 1;
	for (int i = 0; i < w->nk; i++)
		w->K *= w->kd[i];
	for (int i = 0; i < w->nr; i++)
		w->R *= w->rd[i];
	w->inner = w->rd[w->nr - 1];
	w->rows = w->inner ? w->R / w->inner : 0;
	w->s = w->rst[w->nr - 1];
}

/* out[o] = (sum_r inp[koff(o) + roff(r)]) / div (div = R: mean, 1: sum) */
static void sum_forward(float *out, const float *inp, const struct walk *w,
			double div)
{
	int64_t K = w->K, rows = w->rows, inner = w->inner, s = w->s;
#pragma omp parallel for if (K * w->R > PAR_MIN)
	for (int64_t o = 0; o < K; o++) {
		int64_t base = walk_offset(o, w->nk, w->kd, w->kst);
		double sum = 0.0;
		for (int64_t r = 0; r < rows; r++) {
			const float *x = inp + base + walk_offset(r, w->nr - 1, w->rd, w->rst);
			for (int64_t j = 0; j < inner; j++)
				sum += x[j * s];
		}
		out[o] = (float)(sum / div);
	}
}

/* dinp[koff(o) + roff(r)] += dout[o] / div */
static void sum_backward(float *dinp, const float *dout, const struct walk *w,
			 double div)
{
	int64_t K = w->K, rows = w->rows, inner = w->inner, s = w->s;
	if (w->R == 0)
		return;
#pragma omp parallel for if (K * w->R > PAR_MIN)
	for (int64_t o = 0; o < K; o++) {
		int64_t base = walk_offset(o, w->nk, w->kd, w->kst);
		float g = (float)(dout[o] / div);
		for (int64_t r = 0; r < rows; r++) {
			float *dx = dinp + base + walk_offset(r, w->nr - 1, w->rd, w->rst);
			for (int64_t j = 0; j < inner; j++)
				dx[j * s] += g;
		}
	}
}

/* v beats the best so far: larger (sign 1) or smaller (sign -1), or NaN,
 * which then stays (torch.amax and torch.amin propagate NaN) */
static int beats(float v, float best, int sign)
{
	return (sign > 0 ? v > best : v < best) || v != v;
}

/* out[o] = max (sign 1) or min (sign -1) of inp over the reduced dims;
 * with arg, out[o] is instead the index r of the first extreme (PyTorch's
 * argmax: the first of ties, the first NaN). R >= 1. */
static void extreme_forward(float *out, const float *inp, const struct walk *w,
			    int sign, int arg)
{
	int64_t K = w->K, rows = w->rows, inner = w->inner, s = w->s;
#pragma omp parallel for if (K * w->R > PAR_MIN)
	for (int64_t o = 0; o < K; o++) {
		int64_t base = walk_offset(o, w->nk, w->kd, w->kst), at = 0;
		float best = inp[base];
		for (int64_t r = 0; r < rows; r++) {
			const float *x = inp + base + walk_offset(r, w->nr - 1, w->rd, w->rst);
			for (int64_t j = 0; j < inner; j++)
				if (beats(x[j * s], best, sign) && best == best) {
					best = x[j * s];
					at = r * inner + j;
				}
		}
		out[o] = arg ? (float)at : best;
	}
}

/* torch.amax's backward: dout[o] shared evenly among the elements equal to
 * out[o] (the ties; NaN counts as equal to NaN). */
static void extreme_backward(float *dinp, const float *dout, const float *inp,
			     const float *out, const struct walk *w)
{
	int64_t K = w->K, rows = w->rows, inner = w->inner, s = w->s;
#pragma omp parallel for if (K * w->R > PAR_MIN)
	for (int64_t o = 0; o < K; o++) {
		int64_t base = walk_offset(o, w->nk, w->kd, w->kst), count = 0;
		float y = out[o];
		int nan = y != y;
		for (int64_t r = 0; r < rows; r++) {
			const float *x = inp + base + walk_offset(r, w->nr - 1, w->rd, w->rst);
			for (int64_t j = 0; j < inner; j++)
				count += x[j * s] == y || (nan && x[j * s] != x[j * s]);
		}
		if (count == 0)
			continue;
		float g = (float)(dout[o] / (double)count);
		for (int64_t r = 0; r < rows; r++) {
			int64_t off = base + walk_offset(r, w->nr - 1, w->rd, w->rst);
			const float *x = inp + off;
			float *dx = dinp + off;
			for (int64_t j = 0; j < inner; j++)
				if (x[j * s] == y || (nan && x[j * s] != x[j * s]))
					dx[j * s] += g;
		}
	}
}

/* Appends dim (size d, stride s) to a walk, merging it into the last one
 * when the two are contiguous; size-1 dims vanish. */
static void walk_push(int *n, int64_t *wd, int64_t *wst, int64_t d, int64_t s)
{
	if (d == 1)
		return;
	if (*n > 0 && wst[*n - 1] == s * d) {
		wd[*n - 1] *= d;
		wst[*n - 1] = s;
		return;
	}
	wd[*n] = d;
	wst[*n] = s;
	(*n)++;
}

static void walk_close(int *n, int64_t *wd, int64_t *wst)
{
	if (*n == 0) {
		wd[0] = 1;
		wst[0] = 0;
		*n = 1;
	}
}

/* mean, sum, max, min: dim (one index or a list) and keepdim; argmax: one
 * dim and keepdim */
enum { RED_DIM, RED_KEEPDIM };

static const struct dl_op_desc op_argmax, op_max, op_min, op_mean;

static int is_extreme(const struct dl_node *n)
{
	return n->op == &op_max || n->op == &op_min || n->op == &op_argmax;
}

/* The dims hyperparameter as a list (argmax's single dim as one). */
static int red_list(const struct dl_node *n, int64_t *dims)
{
	const struct dl_hp_value *v = &n->hp[RED_DIM];
	if (n->op == &op_argmax) {
		dims[0] = v->i;
		return 1;
	}
	for (int i = 0; i < v->n; i++)
		dims[i] = v->v[i];
	return v->n;
}

/* which dims of an ndim input are reduced; dims already checked */
static void red_dims(const struct dl_node *n, int ndim, int *red)
{
	int64_t dims[2 * DL_HP_MAXN];
	int k = red_list(n, dims);
	for (int i = 0; i < ndim; i++)
		red[i] = 0;
	for (int i = 0; i < k; i++)
		red[dl_dim_index(dims[i], ndim)] = 1;
}

static int red_infer(struct dl_node *n, const struct dl_shape *in,
		     struct dl_shape *out, struct dl_error *err)
{
	char s[128];
	const struct dl_shape *x = &in[0];
	int64_t dims[2 * DL_HP_MAXN];
	int k = red_list(n, dims);
	int red[DL_MAX_DIMS] = {0};
	for (int i = 0; i < k; i++) {
		int d = dl_dim_index(dims[i], x->ndim);
		if (d < 0)
			return dl_node_error(err, n, RED_DIM,
				"dim %lld is out of range for the input %s (dims count the batch dimension: %d to %d)",
				(long long)dims[i], dl_shape_str(x, s, sizeof s),
				-x->ndim, x->ndim - 1);
		if (d == 0)
			return dl_node_error(err, n, RED_DIM,
				"dim %lld is the batch dimension, which stays; per-sample dimensions are 1 to %d (or negative)",
				(long long)dims[i], x->ndim - 1);
		if (red[d]++)
			return dl_node_error(err, n, RED_DIM,
				"dim names dimension %d twice", d);
		if (is_extreme(n) && x->d[d] == 0)
			return dl_node_error(err, n, RED_DIM,
				"dimension %d of the input %s is empty: it has no %s",
				d, dl_shape_str(x, s, sizeof s),
				n->op == &op_min ? "minimum" : "maximum");
	}
	struct dl_shape o;
	memset(&o, 0, sizeof o);
	for (int i = 0; i < x->ndim; i++) {
		if (!red[i])
			o.d[o.ndim++] = x->d[i];
		else if (n->hp[RED_KEEPDIM].i)
			o.d[o.ndim++] = 1;
	}
	*out = o;
	n->ws_bytes = 0;
	n->saved_bytes = 0;
	n->macs = dl_shape_numel(x);
	return 0;
}

/* the kept and reduced walks of the input */
static void red_plan(const struct dl_node *n, const struct dl_shape *x,
		     struct walk *w)
{
	int red[DL_MAX_DIMS];
	int64_t st[DL_MAX_DIMS], stride = 1;
	red_dims(n, x->ndim, red);
	for (int i = x->ndim - 1; i >= 0; i--) {
		st[i] = stride;
		stride *= x->d[i];
	}
	w->nk = w->nr = 0;
	for (int i = 0; i < x->ndim; i++) {
		if (red[i])
			walk_push(&w->nr, w->rd, w->rst, x->d[i], st[i]);
		else
			walk_push(&w->nk, w->kd, w->kst, x->d[i], st[i]);
	}
	walk_close(&w->nk, w->kd, w->kst);
	walk_close(&w->nr, w->rd, w->rst);
	walk_sizes(w);
}

static void red_fwd(struct dl_node *n, const struct dl_tensor *in,
		    struct dl_tensor *out, struct dl_ctx *ctx)
{
	struct walk w;
	(void)ctx;
	red_plan(n, &in[0].shape, &w);
	if (n->op == &op_mean)
		sum_forward(out->data, in[0].data, &w, (double)w.R);
	else if (!is_extreme(n))
		sum_forward(out->data, in[0].data, &w, 1.0);
	else
		extreme_forward(out->data, in[0].data, &w,
				n->op == &op_min ? -1 : 1, n->op == &op_argmax);
}

static void red_bwd(struct dl_node *n, const struct dl_tensor *in,
		    const struct dl_tensor *out, const float *dout,
		    float *const *din, struct dl_ctx *ctx)
{
	struct walk w;
	(void)ctx;
	if (!din[0] || n->op == &op_argmax)
		return;
	red_plan(n, &in[0].shape, &w);
	if (n->op == &op_mean)
		sum_backward(din[0], dout, &w, (double)w.R);
	else if (!is_extreme(n))
		sum_backward(din[0], dout, &w, 1.0);
	else
		extreme_backward(din[0], dout, in[0].data, out->data, &w);
}

static const struct dl_hp_desc red_hp[] = {
	[RED_DIM] = {"dim", DL_HP_INTS, NULL, NULL, DL_HP_REQUIRED},
	[RED_KEEPDIM] = {"keepdim", DL_HP_BOOL, "false", NULL, 0},
};

static const struct dl_hp_desc argmax_hp[] = {
	[RED_DIM] = {"dim", DL_HP_INT, NULL, NULL, DL_HP_REQUIRED},
	[RED_KEEPDIM] = {"keepdim", DL_HP_BOOL, "false", NULL, 0},
};

/* y = x.mean(dim, keepdim): the average over the listed dimensions */
static const struct dl_op_desc op_mean = {
	.name = "mean", .doc = "y = x.mean(dim, keepdim)",
	.min_in = 1, .max_in = 1, .hp = red_hp, .n_hp = 2,
	.infer = red_infer, .forward = red_fwd, .backward = red_bwd,
	.flags = DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

/* y = x.sum(dim, keepdim) */
static const struct dl_op_desc op_sum = {
	.name = "sum", .doc = "y = x.sum(dim, keepdim)",
	.min_in = 1, .max_in = 1, .hp = red_hp, .n_hp = 2,
	.infer = red_infer, .forward = red_fwd, .backward = red_bwd,
	.flags = DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

/* y = torch.amax(x, dim, keepdim); the gradient is shared evenly among
 * tied maxima, as torch.amax's */
static const struct dl_op_desc op_max = {
	.name = "max", .doc = "y = torch.amax(x, dim, keepdim) (ties share the gradient)",
	.min_in = 1, .max_in = 1, .hp = red_hp, .n_hp = 2,
	.infer = red_infer, .forward = red_fwd, .backward = red_bwd,
};

/* y = torch.amin(x, dim, keepdim), ties as max */
static const struct dl_op_desc op_min = {
	.name = "min", .doc = "y = torch.amin(x, dim, keepdim) (ties share the gradient)",
	.min_in = 1, .max_in = 1, .hp = red_hp, .n_hp = 2,
	.infer = red_infer, .forward = red_fwd, .backward = red_bwd,
};

/* y = x.argmax(dim, keepdim) as float32 (the first of ties); piecewise
 * constant, so its backward passes no gradient */
static const struct dl_op_desc op_argmax = {
	.name = "argmax", .doc = "y = x.argmax(dim, keepdim) as float32 indices (no gradient flows)",
	.min_in = 1, .max_in = 1, .hp = argmax_hp, .n_hp = 2,
	.infer = red_infer, .forward = red_fwd, .backward = red_bwd,
	.flags = DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

const struct dl_op_desc *const dl_ops_reduce[] = {
	&op_mean, &op_sum, &op_max, &op_min, &op_argmax, NULL,
};
