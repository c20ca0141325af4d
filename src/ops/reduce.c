/* Reductions: mean over one or more per-sample dimensions (the batch
 * dimension stays). Sums run in double. macs: one per input element. */
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

/* out[o] = (1 / R) sum_r inp[koff(o) + roff(r)]: kept dims kd/kst (nk,
 * K outputs), reduced dims rd/rst (nr, R elements each), strides of inp. */
static void mean_forward(float *out, const float *inp, int nk,
			 const int64_t *kd, const int64_t *kst, int nr,
			 const int64_t *rd, const int64_t *rst)
{
	int64_t K = 1, R = 1;
	for (int i = 0; i < nk; i++)
		K *= kd[i];
	for (int i = 0; i < nr; i++)
		R *= rd[i];
	int64_t inner = rd[nr - 1], rows = R / (inner ? inner : 1), s = rst[nr - 1];
	if (inner == 0)
		rows = 0;
#pragma omp parallel for if (K * R > PAR_MIN)
	for (int64_t o = 0; o < K; o++) {
		int64_t base = walk_offset(o, nk, kd, kst);
		double sum = 0.0;
		for (int64_t r = 0; r < rows; r++) {
			const float *x = inp + base + walk_offset(r, nr - 1, rd, rst);
			for (int64_t j = 0; j < inner; j++)
				sum += x[j * s];
		}
		out[o] = (float)(sum / (double)R);
	}
}

/* dinp[koff(o) + roff(r)] += dout[o] / R */
static void mean_backward(float *dinp, const float *dout, int nk,
			  const int64_t *kd, const int64_t *kst, int nr,
			  const int64_t *rd, const int64_t *rst)
{
	int64_t K = 1, R = 1;
	for (int i = 0; i < nk; i++)
		K *= kd[i];
	for (int i = 0; i < nr; i++)
		R *= rd[i];
	if (R == 0)
		return;
	int64_t inner = rd[nr - 1], rows = R / inner, s = rst[nr - 1];
#pragma omp parallel for if (K * R > PAR_MIN)
	for (int64_t o = 0; o < K; o++) {
		int64_t base = walk_offset(o, nk, kd, kst);
		float g = (float)(dout[o] / (double)R);
		for (int64_t r = 0; r < rows; r++) {
			float *dx = dinp + base + walk_offset(r, nr - 1, rd, rst);
			for (int64_t j = 0; j < inner; j++)
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

enum { MEAN_DIM, MEAN_KEEPDIM };

/* which dims of an ndim input are reduced; dims already checked */
static void mean_dims(const struct dl_node *n, int ndim, int *red)
{
	const struct dl_hp_value *v = &n->hp[MEAN_DIM];
	for (int i = 0; i < ndim; i++)
		red[i] = 0;
	for (int i = 0; i < v->n; i++)
		red[dl_dim_index(v->v[i], ndim)] = 1;
}

static int mean_infer(struct dl_node *n, const struct dl_shape *in,
		      struct dl_shape *out, struct dl_error *err)
{
	char s[128];
	const struct dl_shape *x = &in[0];
	const struct dl_hp_value *v = &n->hp[MEAN_DIM];
	int red[DL_MAX_DIMS] = {0};
	for (int i = 0; i < v->n; i++) {
		int d = dl_dim_index(v->v[i], x->ndim);
		if (d < 0)
			return dl_node_error(err, n, MEAN_DIM,
				"dim %lld is out of range for the input %s (dims count the batch dimension: %d to %d)",
				(long long)v->v[i], dl_shape_str(x, s, sizeof s),
				-x->ndim, x->ndim - 1);
		if (d == 0)
			return dl_node_error(err, n, MEAN_DIM,
				"dim %lld is the batch dimension, which stays; per-sample dimensions are 1 to %d (or negative)",
				(long long)v->v[i], x->ndim - 1);
		if (red[d]++)
			return dl_node_error(err, n, MEAN_DIM,
				"dim names dimension %d twice", d);
	}
	struct dl_shape o;
	memset(&o, 0, sizeof o);
	for (int i = 0; i < x->ndim; i++) {
		if (!red[i])
			o.d[o.ndim++] = x->d[i];
		else if (n->hp[MEAN_KEEPDIM].i)
			o.d[o.ndim++] = 1;
	}
	*out = o;
	n->ws_bytes = 0;
	n->saved_bytes = 0;
	n->macs = dl_shape_numel(x);
	return 0;
}

/* the kept and reduced walks of the input */
static void mean_plan(const struct dl_node *n, const struct dl_shape *x,
		      int *nk, int64_t *kd, int64_t *kst, int *nr, int64_t *rd,
		      int64_t *rst)
{
	int red[DL_MAX_DIMS];
	int64_t st[DL_MAX_DIMS], stride = 1;
	mean_dims(n, x->ndim, red);
	for (int i = x->ndim - 1; i >= 0; i--) {
		st[i] = stride;
		stride *= x->d[i];
	}
	*nk = *nr = 0;
	for (int i = 0; i < x->ndim; i++) {
		if (red[i])
			walk_push(nr, rd, rst, x->d[i], st[i]);
		else
			walk_push(nk, kd, kst, x->d[i], st[i]);
	}
	walk_close(nk, kd, kst);
	walk_close(nr, rd, rst);
}

static void mean_fwd(struct dl_node *n, const struct dl_tensor *in,
		     struct dl_tensor *out, struct dl_ctx *ctx)
{
	int nk, nr;
	int64_t kd[DL_MAX_DIMS], kst[DL_MAX_DIMS], rd[DL_MAX_DIMS], rst[DL_MAX_DIMS];
	mean_plan(n, &in[0].shape, &nk, kd, kst, &nr, rd, rst);
	mean_forward(out->data, in[0].data, nk, kd, kst, nr, rd, rst);
}

static void mean_bwd(struct dl_node *n, const struct dl_tensor *in,
		     const struct dl_tensor *out, const float *dout,
		     float *const *din, struct dl_ctx *ctx)
{
	int nk, nr;
	int64_t kd[DL_MAX_DIMS], kst[DL_MAX_DIMS], rd[DL_MAX_DIMS], rst[DL_MAX_DIMS];
	if (!din[0])
		return;
	mean_plan(n, &in[0].shape, &nk, kd, kst, &nr, rd, rst);
	mean_backward(din[0], dout, nk, kd, kst, nr, rd, rst);
}

static const struct dl_hp_desc mean_hp[] = {
	[MEAN_DIM] = {"dim", DL_HP_INTS, NULL, NULL, DL_HP_REQUIRED},
	[MEAN_KEEPDIM] = {"keepdim", DL_HP_BOOL, "false", NULL, 0},
};

/* y = x.mean(dim, keepdim): the average over the listed dimensions */
static const struct dl_op_desc op_mean = {
	.name = "mean", .doc = "y = x.mean(dim, keepdim)",
	.min_in = 1, .max_in = 1, .hp = mean_hp, .n_hp = 2,
	.infer = mean_infer, .forward = mean_fwd, .backward = mean_bwd,
	.flags = DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

const struct dl_op_desc *const dl_ops_reduce[] = {&op_mean, NULL};
