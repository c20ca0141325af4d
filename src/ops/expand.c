/* Copies that repeat or select: expand (broadcast to a shape, as
 * torch.Tensor.expand and expand_as), tile (torch.Tensor.repeat), triu and
 * tril (the triangles of the last two dimensions) and topk (the k largest
 * or smallest along one dimension, values and indices). Shapes are
 * per sample: the batch dimension stays. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "engine/op.h"
#include "ops/bcast.h"

/* ---- expand ---- */

enum { EX_SHAPE };

/* out: x broadcast to shape (per sample; -1 keeps x's size; new
 * dimensions go in front of x's per-sample ones), or to like's shape */
static int expand_infer(struct dl_node *n, const struct dl_shape *in,
			struct dl_shape *out, struct dl_error *err)
{
	char s[128], t[128];
	const struct dl_shape *x = &in[0];
	const struct dl_hp_value *v = &n->hp[EX_SHAPE];
	struct dl_shape o;
	memset(&o, 0, sizeof o);
	if (n->n_in == 2) {
		if (v->set)
			return dl_node_error(err, n, EX_SHAPE,
				"takes shape or a second input (in: [x, like]), not both");
		o = in[1];
		if (x->d[0] != 1 && x->d[0] != o.d[0])
			return dl_node_error(err, n, -1,
				"the input has batch size %lld and the shape's input %lld; batch sizes must be equal, or 1",
				(long long)x->d[0], (long long)o.d[0]);
	} else {
		if (!v->set)
			return dl_node_error(err, n, -1,
				"needs shape: [...] or a second input whose shape to take (in: [x, like])");
		if (v->n + 1 > DL_MAX_DIMS)
			return dl_node_error(err, n, EX_SHAPE,
				"shape has %d dimensions; at most %d per sample are supported",
				v->n, DL_MAX_DIMS - 1);
		o.ndim = v->n + 1;
		o.d[0] = x->d[0];
		for (int i = 0; i < v->n; i++)
			o.d[i + 1] = v->v[i];
	}
	if (o.ndim < x->ndim)
		return dl_node_error(err, n, n->n_in == 2 ? -1 : EX_SHAPE,
			"cannot expand the input %s to %s: fewer dimensions",
			dl_shape_str(x, s, sizeof s), dl_shape_str(&o, t, sizeof t));
	for (int i = 1; i < o.ndim; i++) {
		int j = x->ndim - (o.ndim - i);
		int64_t xd = j >= 1 ? x->d[j] : -2;
		if (o.d[i] == -1 && xd == -2)
			return dl_node_error(err, n, EX_SHAPE,
				"shape[%d] is -1, but that dimension is new (in front of the input %s's); give its size",
				i - 1, dl_shape_str(x, s, sizeof s));
		if (o.d[i] == -1)
			o.d[i] = xd;
		if (o.d[i] < 0)
			return dl_node_error(err, n, EX_SHAPE,
				"shape has the size %lld; sizes are >= 0, or -1 to keep the input's",
				(long long)o.d[i]);
		if (xd >= 0 && xd != 1 && xd != o.d[i])
			return dl_node_error(err, n, n->n_in == 2 ? -1 : EX_SHAPE,
				"cannot expand the input %s to %s: dimension %d has size %lld, which is neither 1 nor %lld",
				dl_shape_str(x, s, sizeof s), dl_shape_str(&o, t, sizeof t),
				j, (long long)xd, (long long)o.d[i]);
	}
	if (dl_shape_numel(&o) < 0)
		return dl_node_error(err, n, EX_SHAPE, "the output %s is too large",
				     dl_shape_str(&o, s, sizeof s));
	*out = o;
	int64_t nx = dl_shape_numel(x);
	n->ws_bytes = DL_MAX_DIMS * sizeof(int64_t) +
		      (nx != dl_shape_numel(&o) ? (size_t)nx * sizeof(double) : 0);
	n->saved_bytes = 0;
	n->macs = 0;
	return 0;
}

static void expand_fwd(struct dl_node *n, const struct dl_tensor *in,
		       struct dl_tensor *out, struct dl_ctx *ctx)
{
	(void)n;
	if (dl_shape_numel(&out->shape) == 0)
		return;
	struct bcast p;
	dl_bcast_plan(&p, ctx->ws, in, 1, &out->shape);
	int64_t sx = bcast_inner_stride(&p, 0);
	for (int64_t r = 0; r < p.rows; r++) {
		int64_t idx[DL_MAX_DIMS];
		bcast_row(&p, r, idx);
		const float *x = in[0].data + bcast_off(&p, 0, idx, 0);
		float *o = out->data + r * p.inner;
		for (int64_t j = 0; j < p.inner; j++)
			o[j] = x[j * sx];
	}
}

/* dx = dout summed over the expanded dimensions (in doubles) */
static void expand_bwd(struct dl_node *n, const struct dl_tensor *in,
		       const struct dl_tensor *out, const float *dout,
		       float *const *din, struct dl_ctx *ctx)
{
	(void)n;
	if (!din[0] || dl_shape_numel(&out->shape) == 0)
		return;
	struct bcast p;
	int64_t *st = ctx->ws;
	dl_bcast_plan(&p, st, in, 1, &out->shape);
	int64_t nx = dl_shape_numel(&in[0].shape), sx = bcast_inner_stride(&p, 0);
	if (nx == dl_shape_numel(&out->shape)) {
		for (int64_t i = 0; i < nx; i++)
			din[0][i] += dout[i];
		return;
	}
	double *acc = (double *)(st + DL_MAX_DIMS);
	for (int64_t i = 0; i < nx; i++)
		acc[i] = 0.0;
	for (int64_t r = 0; r < p.rows; r++) {
		int64_t idx[DL_MAX_DIMS];
		bcast_row(&p, r, idx);
		double *a = acc + bcast_off(&p, 0, idx, 0);
		const float *g = dout + r * p.inner;
		for (int64_t j = 0; j < p.inner; j++)
			a[j * sx] += g[j];
	}
	for (int64_t i = 0; i < nx; i++)
		din[0][i] += (float)acc[i];
}

/* ---- tile ---- */

enum { TI_REPEATS };

/* The input's per-sample dims padded in front with 1s to m = len(repeats)
 * (as torch.Tensor.repeat), as xd[1..m], with xd[0] the batch. */
static void tile_dims(const struct dl_node *n, const struct dl_shape *x, int64_t *xd)
{
	int m = n->hp[TI_REPEATS].n, k = x->ndim - 1;
	xd[0] = x->d[0];
	for (int i = 0; i < m; i++)
		xd[i + 1] = i < m - k ? 1 : x->d[1 + i - (m - k)];
}

static int tile_infer(struct dl_node *n, const struct dl_shape *in,
		      struct dl_shape *out, struct dl_error *err)
{
	char s[128];
	const struct dl_shape *x = &in[0];
	const struct dl_hp_value *v = &n->hp[TI_REPEATS];
	if (v->n < x->ndim - 1)
		return dl_node_error(err, n, TI_REPEATS,
			"repeats has %d values but the input %s has %d per-sample dimensions; give at least one per dimension",
			v->n, dl_shape_str(x, s, sizeof s), x->ndim - 1);
	if (v->n + 1 > DL_MAX_DIMS)
		return dl_node_error(err, n, TI_REPEATS,
			"repeats has %d values; at most %d per-sample dimensions are supported",
			v->n, DL_MAX_DIMS - 1);
	int64_t xd[DL_MAX_DIMS];
	tile_dims(n, x, xd);
	struct dl_shape o;
	memset(&o, 0, sizeof o);
	o.ndim = v->n + 1;
	o.d[0] = x->d[0];
	for (int i = 0; i < v->n; i++) {
		if (v->v[i] > 0 && xd[i + 1] > DL_MAX_NUMEL / v->v[i])
			return dl_node_error(err, n, TI_REPEATS, "the output would be too large");
		o.d[i + 1] = xd[i + 1] * v->v[i];
	}
	if (dl_shape_numel(&o) < 0)
		return dl_node_error(err, n, TI_REPEATS, "the output %s is too large",
				     dl_shape_str(&o, s, sizeof s));
	*out = o;
	n->ws_bytes = 0;
	n->saved_bytes = 0;
	n->macs = 0;
	return 0;
}

/* The input offset of every output element, in order, passed to f:
 * out[q] = x[off] (forward) or dx[off] += dout[q] (backward). */
#define TILE_WALK(BODY) do { \
	int nd = out->shape.ndim; \
	int64_t xd[DL_MAX_DIMS], xs[DL_MAX_DIMS], stride = 1; \
	tile_dims(n, &in[0].shape, xd); \
	for (int i = nd - 1; i >= 0; i--) { \
		xs[i] = stride; \
		stride *= xd[i]; \
	} \
	int64_t inner = out->shape.d[nd - 1], xi = xd[nd - 1]; \
	int64_t rows = inner ? dl_shape_numel(&out->shape) / inner : 0; \
	for (int64_t r = 0; r < rows; r++) { \
		int64_t q = r, base = 0; \
		for (int i = nd - 2; i >= 0; i--) { \
			base += q % out->shape.d[i] % xd[i] * xs[i]; \
			q /= out->shape.d[i]; \
		} \
		for (int64_t j = 0; j < inner; j++) { \
			int64_t off = base + j % xi, at = r * inner + j; \
			BODY; \
		} \
	} \
} while (0)

static void tile_fwd(struct dl_node *n, const struct dl_tensor *in,
		     struct dl_tensor *out, struct dl_ctx *ctx)
{
	(void)ctx;
	const float *x = in[0].data;
	float *y = out->data;
	TILE_WALK(y[at] = x[off]);
}

/* dx[i] += the sum of dout over i's copies */
static void tile_bwd(struct dl_node *n, const struct dl_tensor *in,
		     const struct dl_tensor *out, const float *dout,
		     float *const *din, struct dl_ctx *ctx)
{
	(void)ctx;
	float *dx = din[0];
	if (!dx)
		return;
	TILE_WALK(dx[off] += dout[at]);
}

/* ---- triu, tril ---- */

enum { TR_DIAGONAL };

static const struct dl_op_desc op_triu;

static int tri_infer(struct dl_node *n, const struct dl_shape *in,
		     struct dl_shape *out, struct dl_error *err)
{
	char s[128];
	if (in[0].ndim < 3)
		return dl_node_error(err, n, -1,
			"expects an input [N, ..., R, C] (a matrix per sample), got %s",
			dl_shape_str(&in[0], s, sizeof s));
	*out = in[0];
	n->ws_bytes = 0;
	n->saved_bytes = 0;
	n->macs = 0;
	return 0;
}

/* y = x where element (i, j) of each matrix is kept, else 0: tril keeps
 * j - i <= diagonal, triu j - i >= diagonal. Forward (x) and backward
 * (x = dout, y += instead of =) are the same walk. */
static void tri_apply(const struct dl_node *n, const struct dl_shape *s,
		      const float *x, float *y, int add)
{
	int64_t R = s->d[s->ndim - 2], C = s->d[s->ndim - 1];
	int64_t mats = R > 0 && C > 0 ? dl_shape_numel(s) / (R * C) : 0;
	int64_t dg = n->hp[TR_DIAGONAL].i;
	int upper = n->op == &op_triu;
	for (int64_t m = 0; m < mats; m++)
		for (int64_t i = 0; i < R; i++) {
			const float *xr = x + (m * R + i) * C;
			float *yr = y + (m * R + i) * C;
			for (int64_t j = 0; j < C; j++) {
				int keep = upper ? j - i >= dg : j - i <= dg;
				if (add)
					yr[j] += keep ? xr[j] : 0.0f;
				else
					yr[j] = keep ? xr[j] : 0.0f;
			}
		}
}

static void tri_fwd(struct dl_node *n, const struct dl_tensor *in,
		    struct dl_tensor *out, struct dl_ctx *ctx)
{
	(void)ctx;
	tri_apply(n, &in[0].shape, in[0].data, out->data, 0);
}

static void tri_bwd(struct dl_node *n, const struct dl_tensor *in,
		    const struct dl_tensor *out, const float *dout,
		    float *const *din, struct dl_ctx *ctx)
{
	(void)ctx;
	(void)in;
	if (din[0])
		tri_apply(n, &out->shape, dout, din[0], 1);
}

/* ---- topk ---- */

enum { TK_K, TK_DIM, TK_LARGEST, TK_SORTED };

/* The input as [outer, L, inner] around dimension dim. */
static void topk_geom(const struct dl_node *n, const struct dl_shape *x,
		      int64_t *outer, int64_t *L, int64_t *inner)
{
	int d = dl_dim_index(n->hp[TK_DIM].i, x->ndim);
	*outer = dl_shape_prod(x, 0, d);
	*L = x->d[d];
	*inner = dl_shape_prod(x, d + 1, x->ndim);
}

static int topk_infer(struct dl_node *n, const struct dl_shape *in,
		      struct dl_shape *out, struct dl_error *err)
{
	char s[128];
	const struct dl_shape *x = &in[0];
	int64_t dim = n->hp[TK_DIM].i, k = n->hp[TK_K].i;
	int d = dl_dim_index(dim, x->ndim);
	if (d < 0)
		return dl_node_error(err, n, TK_DIM,
			"dim %lld is out of range for the input %s (dims count the batch dimension: %d to %d)",
			(long long)dim, dl_shape_str(x, s, sizeof s), -x->ndim, x->ndim - 1);
	if (d == 0)
		return dl_node_error(err, n, TK_DIM,
			"dim %lld is the batch dimension; per-sample dimensions are 1 to %d (or negative)",
			(long long)dim, x->ndim - 1);
	if (k > x->d[d])
		return dl_node_error(err, n, TK_K,
			"k %lld is larger than dimension %d of the input %s (size %lld)",
			(long long)k, d, dl_shape_str(x, s, sizeof s), (long long)x->d[d]);
	out[0] = *x;
	out[0].d[d] = k;
	out[1] = out[0];
	n->ws_bytes = 2 * (size_t)x->d[d] * sizeof(int64_t);
	n->saved_bytes = 0;
	n->macs = dl_shape_numel(x);
	return 0;
}

/* Element a comes before element b: larger (largest) or smaller, NaN
 * counting as larger than every number (as PyTorch's CPU kernel), ties
 * by index; v NULL: by index alone. */
static int topk_before(const float *v, int64_t s, int64_t a, int64_t b, int largest)
{
	if (!v)
		return a < b;
	float x = v[a * s], y = v[b * s];
	int nx = isnan(x), ny = isnan(y);
	if (nx != ny)
		return largest ? nx : ny;
	if (!nx && x != y)
		return largest ? x > y : x < y;
	return a < b;
}

/* Sorts idx[0..L) by topk_before (a merge sort, tmp [L]). */
static void topk_sort(int64_t *idx, int64_t *tmp, int64_t L, const float *v,
		      int64_t s, int largest)
{
	for (int64_t w = 1; w < L; w *= 2) {
		for (int64_t lo = 0; lo < L; lo += 2 * w) {
			int64_t mid = lo + w < L ? lo + w : L;
			int64_t hi = lo + 2 * w < L ? lo + 2 * w : L;
			int64_t a = lo, b = mid, o = lo;
			while (a < mid && b < hi)
				tmp[o++] = topk_before(v, s, idx[b], idx[a], largest)
					   ? idx[b++] : idx[a++];
			while (a < mid)
				tmp[o++] = idx[a++];
			while (b < hi)
				tmp[o++] = idx[b++];
		}
		memcpy(idx, tmp, (size_t)L * sizeof *idx);
	}
}

/* values[o, t, i] = x[o, idx_t, i], indices[o, t, i] = idx_t: the first k
 * of the sorted order (sorted), or those k in ascending index order */
static void topk_fwd(struct dl_node *n, const struct dl_tensor *in,
		     struct dl_tensor *out, struct dl_ctx *ctx)
{
	int64_t outer, L, inner, k = n->hp[TK_K].i;
	int largest = (int)n->hp[TK_LARGEST].i, sorted = (int)n->hp[TK_SORTED].i;
	topk_geom(n, &in[0].shape, &outer, &L, &inner);
	int64_t *idx = ctx->ws, *tmp = idx + L;
	for (int64_t o = 0; o < outer; o++)
		for (int64_t i = 0; i < inner; i++) {
			const float *x = in[0].data + o * L * inner + i;
			for (int64_t l = 0; l < L; l++)
				idx[l] = l;
			topk_sort(idx, tmp, L, x, inner, largest);
			if (!sorted)
				topk_sort(idx, tmp, k, NULL, 0, 0);
			float *yv = out[0].data + o * k * inner + i;
			float *yi = out[1].data + o * k * inner + i;
			for (int64_t t = 0; t < k; t++) {
				yv[t * inner] = x[idx[t] * inner];
				yi[t * inner] = (float)idx[t];
			}
		}
}

/* dx[o, idx_t, i] += dvalues[o, t, i]; the indices pass nothing */
static void topk_bwd(struct dl_node *n, const struct dl_tensor *in,
		     const struct dl_tensor *out, const float *dout,
		     float *const *din, struct dl_ctx *ctx)
{
	int64_t outer, L, inner, k = n->hp[TK_K].i;
	(void)ctx;
	if (!din[0])
		return;
	topk_geom(n, &in[0].shape, &outer, &L, &inner);
	for (int64_t o = 0; o < outer; o++)
		for (int64_t t = 0; t < k; t++)
			for (int64_t i = 0; i < inner; i++) {
				int64_t q = (o * k + t) * inner + i;
				int64_t l = (int64_t)out[1].data[q];
				din[0][(o * L + l) * inner + i] += dout[q];
			}
}

static int topk_n_outputs(const struct dl_node *n)
{
	(void)n;
	return 2;
}

/* ---- descriptors ---- */

static const struct dl_hp_desc expand_hp[] = {
	[EX_SHAPE] = {"shape", DL_HP_INTS, NULL, NULL, 0},
};
static const struct dl_hp_desc tile_hp[] = {
	[TI_REPEATS] = {"repeats", DL_HP_INTS, NULL, NULL, DL_HP_REQUIRED | DL_HP_NONNEG},
};
static const struct dl_hp_desc tri_hp[] = {
	[TR_DIAGONAL] = {"diagonal", DL_HP_INT, "0", NULL, 0},
};
static const struct dl_hp_desc topk_hp[] = {
	[TK_K] = {"k", DL_HP_INT, NULL, NULL, DL_HP_REQUIRED | DL_HP_POSITIVE},
	[TK_DIM] = {"dim", DL_HP_INT, "-1", NULL, 0},
	[TK_LARGEST] = {"largest", DL_HP_BOOL, "true", NULL, 0},
	[TK_SORTED] = {"sorted", DL_HP_BOOL, "true", NULL, 0},
};

/* y = x.expand(N, *shape) (-1 keeps a size; new dimensions in front of
 * the per-sample ones), or with in: [x, like] x.expand_as(like);
 * dx = dout summed over the expanded dimensions */
static const struct dl_op_desc op_expand = {
	.name = "expand",
	.doc = "y = x.expand(N, *shape), or x.expand_as(like) with in: [x, like]",
	.min_in = 1, .max_in = 2, .hp = expand_hp, .n_hp = 1,
	.infer = expand_infer, .forward = expand_fwd, .backward = expand_bwd,
	.flags = DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

/* y = x.repeat(1, *repeats) on the per-sample dimensions (x padded in
 * front with size-1 dimensions to len(repeats)); dx sums dout's copies */
static const struct dl_op_desc op_tile = {
	.name = "tile",
	.doc = "y = x.repeat(1, *repeats): per-sample dimensions repeated",
	.min_in = 1, .max_in = 1, .hp = tile_hp, .n_hp = 1,
	.infer = tile_infer, .forward = tile_fwd, .backward = tile_bwd,
	.flags = DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

/* y[..., i, j] = x[..., i, j] if j - i >= diagonal else 0; dx = dout
 * masked the same way */
static const struct dl_op_desc op_triu = {
	.name = "triu", .doc = "y = torch.triu(x, diagonal): x[..., i, j] where j - i >= diagonal, else 0",
	.min_in = 1, .max_in = 1, .hp = tri_hp, .n_hp = 1,
	.infer = tri_infer, .forward = tri_fwd, .backward = tri_bwd,
	.flags = DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

/* y[..., i, j] = x[..., i, j] if j - i <= diagonal else 0 */
static const struct dl_op_desc op_tril = {
	.name = "tril", .doc = "y = torch.tril(x, diagonal): x[..., i, j] where j - i <= diagonal, else 0",
	.min_in = 1, .max_in = 1, .hp = tri_hp, .n_hp = 1,
	.infer = tri_infer, .forward = tri_fwd, .backward = tri_bwd,
	.flags = DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

/* values, indices = torch.topk(x, k, dim, largest, sorted), indices as
 * floats (output NAME.1); ties keep the lower index first, NaN counts as
 * the largest; dx[idx] += dvalues */
static const struct dl_op_desc op_topk = {
	.name = "topk",
	.doc = "values, indices = torch.topk(x, k, dim, largest, sorted); indices as floats (NAME.1)",
	.min_in = 1, .max_in = 1, .hp = topk_hp, .n_hp = 4,
	.infer = topk_infer, .forward = topk_fwd, .backward = topk_bwd,
	.flags = DL_OP_BWD_NO_INPUTS,
	.n_outputs = topk_n_outputs,
};

const struct dl_op_desc *const dl_ops_expand[] = {
	&op_expand, &op_tile, &op_triu, &op_tril, &op_topk, NULL,
};
