/* Data movement: identity, flatten, reshape, permute, transpose, slice, pad
 * and concat. Dimensions count the batch dimension, as in PyTorch, and the
 * batch stays first: no op here moves, merges or cuts it. macs: 0. */
#include <stdio.h>
#include <string.h>

#include "engine/op.h"
#include "engine/stepper.h"

#define PAR_MIN 32768 /* elements below which a loop stays serial */

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static void set_costs(struct dl_node *n)
{
	n->ws_bytes = 0;
	n->saved_bytes = 0;
	n->macs = 0;
}

/* ---- copies: identity, flatten, reshape ---- */

static void copy_forward(float *out, const float *inp, int64_t n)
{
	if (out != inp && n > 0)
		memcpy(out, inp, (size_t)n * sizeof *out);
}

static void copy_backward(float *dinp, const float *dout, int64_t n)
{
#pragma omp parallel for if (n > PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		dinp[i] += dout[i];
}

static void copy_fwd(struct dl_node *n, const struct dl_tensor *in,
		     struct dl_tensor *out, struct dl_ctx *ctx)
{
	copy_forward(out->data, in[0].data, dl_shape_numel(&in[0].shape));
}

static void copy_bwd(struct dl_node *n, const struct dl_tensor *in,
		     const struct dl_tensor *out, const float *dout,
		     float *const *din, struct dl_ctx *ctx)
{
	if (din[0])
		copy_backward(din[0], dout, dl_shape_numel(&in[0].shape));
}

static int identity_infer(struct dl_node *n, const struct dl_shape *in,
			  struct dl_shape *out, struct dl_error *err)
{
	*out = in[0];
	set_costs(n);
	return 0;
}

enum { FL_START, FL_END };

static int flatten_infer(struct dl_node *n, const struct dl_shape *in,
			 struct dl_shape *out, struct dl_error *err)
{
	char s[128];
	const struct dl_shape *x = &in[0];
	int sd = dl_dim_index(n->hp[FL_START].i, x->ndim);
	int ed = dl_dim_index(n->hp[FL_END].i, x->ndim);
	for (int k = FL_START; k <= FL_END; k++)
		if ((k == FL_START ? sd : ed) < 0)
			return dl_node_error(err, n, k,
				"%s %lld is out of range for the input %s (dims count the batch dimension: %d to %d)",
				n->op->hp[k].name, (long long)n->hp[k].i,
				dl_shape_str(x, s, sizeof s), -x->ndim, x->ndim - 1);
	if (sd == 0)
		return dl_node_error(err, n, FL_START,
			"start_dim 0 would merge the batch dimension; per-sample dimensions start at 1");
	if (sd > ed)
		return dl_node_error(err, n, FL_START,
			"start_dim %lld comes after end_dim %lld in the input %s",
			(long long)n->hp[FL_START].i, (long long)n->hp[FL_END].i,
			dl_shape_str(x, s, sizeof s));
	struct dl_shape o;
	memset(&o, 0, sizeof o);
	for (int i = 0; i < sd; i++)
		o.d[o.ndim++] = x->d[i];
	o.d[o.ndim++] = dl_shape_prod(x, sd, ed + 1);
	for (int i = ed + 1; i < x->ndim; i++)
		o.d[o.ndim++] = x->d[i];
	*out = o;
	set_costs(n);
	return 0;
}

static int reshape_infer(struct dl_node *n, const struct dl_shape *in,
			 struct dl_shape *out, struct dl_error *err)
{
	char s[128];
	const struct dl_shape *x = &in[0];
	const struct dl_hp_value *v = &n->hp[0];
	if (v->n + 1 > DL_MAX_DIMS)
		return dl_node_error(err, n, 0,
			"shape has %d dimensions; at most %d per sample are supported",
			v->n, DL_MAX_DIMS - 1);
	int64_t have = dl_shape_prod(x, 1, x->ndim), known = 1;
	int wild = -1;
	for (int i = 0; i < v->n; i++) {
		if (v->v[i] == -1) {
			if (wild >= 0)
				return dl_node_error(err, n, 0,
					"shape has more than one -1; at most one size can be inferred");
			wild = i;
		} else if (v->v[i] < 0) {
			return dl_node_error(err, n, 0,
				"shape has the size %lld; sizes are >= 0, or -1 for the one inferred",
				(long long)v->v[i]);
		} else if (v->v[i] > DL_MAX_NUMEL || (known && v->v[i] > DL_MAX_NUMEL / known)) {
			return dl_node_error(err, n, 0, "shape is too large");
		} else {
			known *= v->v[i];
		}
	}
	struct dl_shape o;
	memset(&o, 0, sizeof o);
	o.ndim = v->n + 1;
	o.d[0] = x->d[0];
	for (int i = 0; i < v->n; i++)
		o.d[i + 1] = v->v[i];
	if (wild >= 0) {
		if (known == 0 || have % known != 0)
			return dl_node_error(err, n, 0,
				"cannot infer the -1 in shape: the input %s has %lld values per sample, %s%lld",
				dl_shape_str(x, s, sizeof s), (long long)have,
				known == 0 ? "and the other sizes hold " : "not a multiple of ",
				(long long)known);
		o.d[wild + 1] = have / known;
	} else if (known != have) {
		return dl_node_error(err, n, 0,
			"shape holds %lld values per sample but the input %s has %lld",
			(long long)known, dl_shape_str(x, s, sizeof s), (long long)have);
	}
	*out = o;
	set_costs(n);
	return 0;
}

/* ---- permute, transpose ---- */

/* out [od] = inp with its dimensions permuted: out element j (multi-index)
 * reads inp at sum_i j_i ist[i]. */
static void permute_forward(float *out, const float *inp, int nd,
			    const int64_t *od, const int64_t *ist)
{
	int64_t inner = od[nd - 1], rows = 1;
	for (int i = 0; i < nd - 1; i++)
		rows *= od[i];
	int64_t s = ist[nd - 1];
#pragma omp parallel for if (rows * inner > PAR_MIN)
	for (int64_t r = 0; r < rows; r++) {
		int64_t base = 0, q = r;
		for (int i = nd - 2; i >= 0; i--) {
			base += q % od[i] * ist[i];
			q /= od[i];
		}
		float *o = out + r * inner;
		for (int64_t j = 0; j < inner; j++)
			o[j] = inp[base + j * s];
	}
}

static void permute_backward(float *dinp, const float *dout, int nd,
			     const int64_t *od, const int64_t *ist)
{
	int64_t inner = od[nd - 1], rows = 1;
	for (int i = 0; i < nd - 1; i++)
		rows *= od[i];
	int64_t s = ist[nd - 1];
#pragma omp parallel for if (rows * inner > PAR_MIN)
	for (int64_t r = 0; r < rows; r++) {
		int64_t base = 0, q = r;
		for (int i = nd - 2; i >= 0; i--) {
			base += q % od[i] * ist[i];
			q /= od[i];
		}
		const float *g = dout + r * inner;
		for (int64_t j = 0; j < inner; j++)
			dinp[base + j * s] += g[j];
	}
}

/* The output dims and input strides of x permuted by perm, with size-1
 * dims dropped and dims that stay contiguous merged. Returns their count. */
static int permute_plan(const struct dl_shape *x, const int *perm,
			int64_t *od, int64_t *ist)
{
	int64_t st[DL_MAX_DIMS], stride = 1;
	for (int i = x->ndim - 1; i >= 0; i--) {
		st[i] = stride;
		stride *= x->d[i];
	}
	int m = 0;
	for (int i = 0; i < x->ndim; i++) {
		int64_t d = x->d[perm[i]], s = st[perm[i]];
		if (d == 1)
			continue;
		if (m > 0 && ist[m - 1] == s * d) {
			od[m - 1] *= d;
			ist[m - 1] = s;
		} else {
			od[m] = d;
			ist[m] = s;
			m++;
		}
	}
	if (m == 0) {
		od[0] = 1;
		ist[0] = 0;
		m = 1;
	}
	return m;
}

/* perm from the hyperparameters: permute's dims, or transpose's swap */
static const struct dl_op_desc op_permute;

static void get_perm(const struct dl_node *n, int ndim, int *perm)
{
	for (int i = 0; i < ndim; i++)
		perm[i] = i;
	if (n->op == &op_permute) {
		for (int i = 0; i < ndim; i++)
			perm[i] = dl_dim_index(n->hp[0].v[i], ndim);
	} else {
		int a = dl_dim_index(n->hp[0].i, ndim);
		int b = dl_dim_index(n->hp[1].i, ndim);
		perm[a] = b;
		perm[b] = a;
	}
}

static int permute_infer(struct dl_node *n, const struct dl_shape *in,
			 struct dl_shape *out, struct dl_error *err)
{
	char s[128];
	const struct dl_shape *x = &in[0];
	const struct dl_hp_value *v = &n->hp[0];
	if (v->n != x->ndim)
		return dl_node_error(err, n, 0,
			"dims has %d entries but the input %s has %d dimensions (the batch dimension included, as dims[0] = 0)",
			v->n, dl_shape_str(x, s, sizeof s), x->ndim);
	int seen[DL_MAX_DIMS] = {0};
	for (int i = 0; i < v->n; i++) {
		int d = dl_dim_index(v->v[i], x->ndim);
		if (d < 0)
			return dl_node_error(err, n, 0,
				"dims[%d] = %lld is out of range for the input %s (%d to %d)",
				i, (long long)v->v[i], dl_shape_str(x, s, sizeof s),
				-x->ndim, x->ndim - 1);
		if (seen[d]++)
			return dl_node_error(err, n, 0,
				"dims names dimension %d twice; it must be a permutation of 0..%d",
				d, x->ndim - 1);
	}
	if (dl_dim_index(v->v[0], x->ndim) != 0)
		return dl_node_error(err, n, 0,
			"dims[0] is %lld; the batch dimension stays first, so dims[0] must be 0",
			(long long)v->v[0]);
	int perm[DL_MAX_DIMS];
	get_perm(n, x->ndim, perm);
	*out = *x;
	for (int i = 0; i < x->ndim; i++)
		out->d[i] = x->d[perm[i]];
	set_costs(n);
	return 0;
}

static int transpose_infer(struct dl_node *n, const struct dl_shape *in,
			   struct dl_shape *out, struct dl_error *err)
{
	char s[128];
	const struct dl_shape *x = &in[0];
	for (int k = 0; k < 2; k++) {
		int d = dl_dim_index(n->hp[k].i, x->ndim);
		if (d < 0)
			return dl_node_error(err, n, k,
				"%s %lld is out of range for the input %s (dims count the batch dimension: %d to %d)",
				n->op->hp[k].name, (long long)n->hp[k].i,
				dl_shape_str(x, s, sizeof s), -x->ndim, x->ndim - 1);
		if (d == 0)
			return dl_node_error(err, n, k,
				"%s %lld is the batch dimension, which stays first; transpose per-sample dimensions (1 to %d, or negative)",
				n->op->hp[k].name, (long long)n->hp[k].i, x->ndim - 1);
	}
	int perm[DL_MAX_DIMS];
	get_perm(n, x->ndim, perm);
	*out = *x;
	for (int i = 0; i < x->ndim; i++)
		out->d[i] = x->d[perm[i]];
	set_costs(n);
	return 0;
}

static void permute_fwd(struct dl_node *n, const struct dl_tensor *in,
			struct dl_tensor *out, struct dl_ctx *ctx)
{
	int perm[DL_MAX_DIMS];
	int64_t od[DL_MAX_DIMS], ist[DL_MAX_DIMS];
	if (dl_shape_numel(&out->shape) == 0)
		return;
	get_perm(n, in[0].shape.ndim, perm);
	int nd = permute_plan(&in[0].shape, perm, od, ist);
	permute_forward(out->data, in[0].data, nd, od, ist);
}

static void permute_bwd(struct dl_node *n, const struct dl_tensor *in,
			const struct dl_tensor *out, const float *dout,
			float *const *din, struct dl_ctx *ctx)
{
	int perm[DL_MAX_DIMS];
	int64_t od[DL_MAX_DIMS], ist[DL_MAX_DIMS];
	if (!din[0] || dl_shape_numel(&out->shape) == 0)
		return;
	get_perm(n, in[0].shape.ndim, perm);
	int nd = permute_plan(&in[0].shape, perm, od, ist);
	permute_backward(din[0], dout, nd, od, ist);
}

/* ---- slice ---- */

/* out [outer, len, inner] = inp [outer, L, inner] at rows b, b + step, ... */
static void slice_forward(float *out, const float *inp, int64_t outer,
			  int64_t L, int64_t inner, int64_t b, int64_t step,
			  int64_t len)
{
	int64_t rows = outer * len;
#pragma omp parallel for if (rows * inner > PAR_MIN)
	for (int64_t r = 0; r < rows; r++) {
		int64_t o = r / len, t = r % len;
		memcpy(out + r * inner, inp + (o * L + b + t * step) * inner,
		       (size_t)inner * sizeof *out);
	}
}

static void slice_backward(float *dinp, const float *dout, int64_t outer,
			   int64_t L, int64_t inner, int64_t b, int64_t step,
			   int64_t len)
{
	int64_t rows = outer * len;
#pragma omp parallel for if (rows * inner > PAR_MIN)
	for (int64_t r = 0; r < rows; r++) {
		int64_t o = r / len, t = r % len;
		float *dx = dinp + (o * L + b + t * step) * inner;
		const float *g = dout + r * inner;
		for (int64_t j = 0; j < inner; j++)
			dx[j] += g[j];
	}
}

enum { SL_DIM, SL_START, SL_END, SL_STEP };

/* Python's slice of a dimension of size L: first index and count */
static void slice_bounds(const struct dl_node *n, int64_t L, int64_t *b,
			 int64_t *len)
{
	int64_t start = n->hp[SL_START].i, step = n->hp[SL_STEP].i;
	int64_t end = n->hp[SL_END].set ? n->hp[SL_END].i : L;
	if (start < 0)
		start += L;
	if (end < 0)
		end += L;
	start = min64(max64(start, 0), L);
	end = min64(max64(end, 0), L);
	*b = start;
	*len = end > start ? (end - start - 1) / step + 1 : 0;
}

static int slice_infer(struct dl_node *n, const struct dl_shape *in,
		       struct dl_shape *out, struct dl_error *err)
{
	char s[128];
	const struct dl_shape *x = &in[0];
	int d = dl_dim_index(n->hp[SL_DIM].i, x->ndim);
	if (d < 0)
		return dl_node_error(err, n, SL_DIM,
			"dim %lld is out of range for the input %s (dims count the batch dimension: %d to %d)",
			(long long)n->hp[SL_DIM].i, dl_shape_str(x, s, sizeof s),
			-x->ndim, x->ndim - 1);
	if (d == 0)
		return dl_node_error(err, n, SL_DIM,
			"dim %lld is the batch dimension, which cannot be sliced; per-sample dimensions are 1 to %d (or negative)",
			(long long)n->hp[SL_DIM].i, x->ndim - 1);
	int64_t b, len;
	slice_bounds(n, x->d[d], &b, &len);
	*out = *x;
	out->d[d] = len;
	set_costs(n);
	return 0;
}

static void slice_split(const struct dl_node *n, const struct dl_shape *x,
			int64_t *outer, int64_t *L, int64_t *inner, int64_t *b,
			int64_t *len)
{
	int d = dl_dim_index(n->hp[SL_DIM].i, x->ndim);
	*outer = dl_shape_prod(x, 0, d);
	*L = x->d[d];
	*inner = dl_shape_prod(x, d + 1, x->ndim);
	slice_bounds(n, *L, b, len);
}

static void slice_fwd(struct dl_node *n, const struct dl_tensor *in,
		      struct dl_tensor *out, struct dl_ctx *ctx)
{
	int64_t outer, L, inner, b, len;
	slice_split(n, &in[0].shape, &outer, &L, &inner, &b, &len);
	slice_forward(out->data, in[0].data, outer, L, inner, b,
		      n->hp[SL_STEP].i, len);
}

static void slice_bwd(struct dl_node *n, const struct dl_tensor *in,
		      const struct dl_tensor *out, const float *dout,
		      float *const *din, struct dl_ctx *ctx)
{
	int64_t outer, L, inner, b, len;
	if (!din[0])
		return;
	slice_split(n, &in[0].shape, &outer, &L, &inner, &b, &len);
	slice_backward(din[0], dout, outer, L, inner, b, n->hp[SL_STEP].i, len);
}

/* ---- pad ---- */

/* out [od] = inp [id] shifted by before[i] in each dim (negative: cropped),
 * value where no input element lands. */
static void pad_forward(float *out, const float *inp, int nd,
			const int64_t *id, const int64_t *od,
			const int64_t *before, float value)
{
	int64_t inner = od[nd - 1], rows = 1;
	for (int i = 0; i < nd - 1; i++)
		rows *= od[i];
	int64_t b = before[nd - 1];
	int64_t lo = max64(b, 0), hi = min64(inner, b + id[nd - 1]);
#pragma omp parallel for if (rows * inner > PAR_MIN)
	for (int64_t r = 0; r < rows; r++) {
		int64_t idx[DL_MAX_DIMS], q = r, base = 0;
		int valid = 1;
		for (int i = nd - 2; i >= 0; i--) {
			idx[i] = q % od[i] - before[i];
			q /= od[i];
			valid &= idx[i] >= 0 && idx[i] < id[i];
		}
		for (int i = 0; i < nd - 1; i++)
			base = base * id[i] + idx[i];
		float *o = out + r * inner;
		if (!valid || lo >= hi) {
			for (int64_t j = 0; j < inner; j++)
				o[j] = value;
			continue;
		}
		for (int64_t j = 0; j < lo; j++)
			o[j] = value;
		memcpy(o + lo, inp + base * id[nd - 1] + (lo - b),
		       (size_t)(hi - lo) * sizeof *o);
		for (int64_t j = hi; j < inner; j++)
			o[j] = value;
	}
}

static void pad_backward(float *dinp, const float *dout, int nd,
			 const int64_t *id, const int64_t *od,
			 const int64_t *before)
{
	int64_t inner = od[nd - 1], rows = 1;
	for (int i = 0; i < nd - 1; i++)
		rows *= od[i];
	int64_t b = before[nd - 1];
	int64_t lo = max64(b, 0), hi = min64(inner, b + id[nd - 1]);
	if (lo >= hi)
		return;
#pragma omp parallel for if (rows * inner > PAR_MIN)
	for (int64_t r = 0; r < rows; r++) {
		int64_t idx[DL_MAX_DIMS], q = r, base = 0;
		int valid = 1;
		for (int i = nd - 2; i >= 0; i--) {
			idx[i] = q % od[i] - before[i];
			q /= od[i];
			valid &= idx[i] >= 0 && idx[i] < id[i];
		}
		if (!valid)
			continue;
		for (int i = 0; i < nd - 1; i++)
			base = base * id[i] + idx[i];
		float *dx = dinp + base * id[nd - 1] + (lo - b);
		const float *g = dout + r * inner + lo;
		for (int64_t j = 0; j < hi - lo; j++)
			dx[j] += g[j];
	}
}

enum { PAD_PADDING, PAD_VALUE };

/* F.pad's flat list, last dimension first, as per-dimension amounts */
static void pad_amounts(const struct dl_node *n, int ndim, int64_t *before,
			int64_t *after)
{
	const struct dl_hp_value *v = &n->hp[PAD_PADDING];
	for (int i = 0; i < ndim; i++)
		before[i] = after[i] = 0;
	for (int p = 0; p < v->n / 2; p++) {
		before[ndim - 1 - p] = v->v[2 * p];
		after[ndim - 1 - p] = v->v[2 * p + 1];
	}
}

static int pad_infer(struct dl_node *n, const struct dl_shape *in,
		     struct dl_shape *out, struct dl_error *err)
{
	char s[128];
	const struct dl_shape *x = &in[0];
	const struct dl_hp_value *v = &n->hp[PAD_PADDING];
	if (v->n % 2 != 0)
		return dl_node_error(err, n, PAD_PADDING,
			"padding has %d values; it takes pairs (before, after), last dimension first, as F.pad",
			v->n);
	if (v->n / 2 > x->ndim - 1)
		return dl_node_error(err, n, PAD_PADDING,
			"padding has %d pairs but the input %s has only %d per-sample dimensions (the batch dimension is not padded)",
			v->n / 2, dl_shape_str(x, s, sizeof s), x->ndim - 1);
	int64_t before[DL_MAX_DIMS], after[DL_MAX_DIMS];
	pad_amounts(n, x->ndim, before, after);
	*out = *x;
	for (int i = 1; i < x->ndim; i++) {
		int64_t d = x->d[i] + before[i] + after[i];
		if (d < 0)
			return dl_node_error(err, n, PAD_PADDING,
				"padding (%lld, %lld) of dimension %d (size %lld) of the input %s leaves a negative size",
				(long long)before[i], (long long)after[i], i,
				(long long)x->d[i], dl_shape_str(x, s, sizeof s));
		out->d[i] = d;
	}
	if (dl_shape_numel(out) < 0)
		return dl_node_error(err, n, PAD_PADDING, "padding makes the output too large");
	set_costs(n);
	return 0;
}

static void pad_fwd(struct dl_node *n, const struct dl_tensor *in,
		    struct dl_tensor *out, struct dl_ctx *ctx)
{
	int64_t before[DL_MAX_DIMS], after[DL_MAX_DIMS];
	if (dl_shape_numel(&out->shape) == 0)
		return;
	pad_amounts(n, in[0].shape.ndim, before, after);
	pad_forward(out->data, in[0].data, in[0].shape.ndim, in[0].shape.d,
		    out->shape.d, before, (float)n->hp[PAD_VALUE].f);
}

static void pad_bwd(struct dl_node *n, const struct dl_tensor *in,
		    const struct dl_tensor *out, const float *dout,
		    float *const *din, struct dl_ctx *ctx)
{
	int64_t before[DL_MAX_DIMS], after[DL_MAX_DIMS];
	if (!din[0] || dl_shape_numel(&out->shape) == 0)
		return;
	pad_amounts(n, in[0].shape.ndim, before, after);
	pad_backward(din[0], dout, in[0].shape.ndim, in[0].shape.d,
		     out->shape.d, before);
}

/* ---- concat ---- */

/* out [outer, sum D_k, inner] = the inputs [outer, D_k, inner] side by side */
static void concat_forward(float *out, const struct dl_tensor *in, int K,
			   int dim, int64_t outer, int64_t inner)
{
	int64_t Do = 0;
	for (int k = 0; k < K; k++)
		Do += in[k].shape.d[dim];
#pragma omp parallel for if (outer * Do * inner > PAR_MIN)
	for (int64_t o = 0; o < outer; o++) {
		float *dst = out + o * Do * inner;
		for (int k = 0; k < K; k++) {
			int64_t chunk = in[k].shape.d[dim] * inner;
			if (chunk)
				memcpy(dst, in[k].data + o * chunk,
				       (size_t)chunk * sizeof *dst);
			dst += chunk;
		}
	}
}

static void concat_backward(float *const *din, const float *dout,
			    const struct dl_tensor *in, int K, int dim,
			    int64_t outer, int64_t inner)
{
	int64_t Do = 0;
	for (int k = 0; k < K; k++)
		Do += in[k].shape.d[dim];
#pragma omp parallel for if (outer * Do * inner > PAR_MIN)
	for (int64_t o = 0; o < outer; o++) {
		const float *g = dout + o * Do * inner;
		for (int k = 0; k < K; k++) {
			int64_t chunk = in[k].shape.d[dim] * inner;
			if (din[k]) {
				float *dx = din[k] + o * chunk;
				for (int64_t j = 0; j < chunk; j++)
					dx[j] += g[j];
			}
			g += chunk;
		}
	}
}

static int concat_infer(struct dl_node *n, const struct dl_shape *in,
			struct dl_shape *out, struct dl_error *err)
{
	char s[128], t[128];
	const struct dl_shape *x = &in[0];
	if (n->n_in < 2)
		return dl_node_error(err, n, -1, "takes at least 2 inputs, got %d", n->n_in);
	int d = dl_dim_index(n->hp[0].i, x->ndim);
	if (d < 0)
		return dl_node_error(err, n, 0,
			"dim %lld is out of range for the input %s (dims count the batch dimension: %d to %d)",
			(long long)n->hp[0].i, dl_shape_str(x, s, sizeof s),
			-x->ndim, x->ndim - 1);
	if (d == 0)
		return dl_node_error(err, n, 0,
			"dim %lld is the batch dimension; concat joins per-sample dimensions (1 to %d, or negative)",
			(long long)n->hp[0].i, x->ndim - 1);
	*out = *x;
	for (int k = 1; k < n->n_in; k++) {
		int same = in[k].ndim == x->ndim;
		for (int i = 0; same && i < x->ndim; i++)
			same = i == d || in[k].d[i] == x->d[i];
		if (!same)
			return dl_node_error(err, n, -1,
				"input %d has shape %s and input 1 has shape %s; all dimensions but dim %d must match",
				k + 1, dl_shape_str(&in[k], s, sizeof s),
				dl_shape_str(x, t, sizeof t), d);
		out->d[d] += in[k].d[d];
	}
	if (dl_shape_numel(out) < 0)
		return dl_node_error(err, n, -1, "the output is too large");
	set_costs(n);
	return 0;
}

static void concat_fwd(struct dl_node *n, const struct dl_tensor *in,
		       struct dl_tensor *out, struct dl_ctx *ctx)
{
	const struct dl_shape *o = &out->shape;
	int d = dl_dim_index(n->hp[0].i, o->ndim);
	concat_forward(out->data, in, n->n_in, d, dl_shape_prod(o, 0, d),
		       dl_shape_prod(o, d + 1, o->ndim));
}

static void concat_bwd(struct dl_node *n, const struct dl_tensor *in,
		       const struct dl_tensor *out, const float *dout,
		       float *const *din, struct dl_ctx *ctx)
{
	const struct dl_shape *o = &out->shape;
	int d = dl_dim_index(n->hp[0].i, o->ndim);
	concat_backward(din, dout, in, n->n_in, d, dl_shape_prod(o, 0, d),
			dl_shape_prod(o, d + 1, o->ndim));
}

/* ---- descriptors ---- */

static const struct dl_hp_desc flatten_hp[] = {
	[FL_START] = {"start_dim", DL_HP_INT, "1", NULL, 0},
	[FL_END] = {"end_dim", DL_HP_INT, "-1", NULL, 0},
};
static const struct dl_hp_desc reshape_hp[] = {
	{"shape", DL_HP_INTS, NULL, NULL, DL_HP_REQUIRED},
};
static const struct dl_hp_desc permute_hp[] = {
	{"dims", DL_HP_INTS, NULL, NULL, DL_HP_REQUIRED},
};
static const struct dl_hp_desc transpose_hp[] = {
	{"dim0", DL_HP_INT, NULL, NULL, DL_HP_REQUIRED},
	{"dim1", DL_HP_INT, NULL, NULL, DL_HP_REQUIRED},
};
static const struct dl_hp_desc slice_hp[] = {
	[SL_DIM] = {"dim", DL_HP_INT, NULL, NULL, DL_HP_REQUIRED},
	[SL_START] = {"start", DL_HP_INT, "0", NULL, 0},
	[SL_END] = {"end", DL_HP_INT, NULL, NULL, DL_HP_DERIVED},
	[SL_STEP] = {"step", DL_HP_INT, "1", NULL, DL_HP_POSITIVE},
};
static const struct dl_hp_desc pad_hp[] = {
	[PAD_PADDING] = {"padding", DL_HP_INTS, NULL, NULL, DL_HP_REQUIRED},
	[PAD_VALUE] = {"value", DL_HP_FLOAT, "0", NULL, 0},
};
static const struct dl_hp_desc concat_hp[] = {
	{"dim", DL_HP_INT, "1", NULL, 0},
};

/* y = x */
static const struct dl_op_desc op_identity = {
	.name = "identity", .doc = "y = x",
	.min_in = 1, .max_in = 1,
	.infer = identity_infer, .forward = copy_fwd, .backward = copy_bwd,
	.flags = DL_OP_INPLACE_OK | DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
	.step = dl_step_pointwise, .fuse = DL_FUSE_IDENTITY,
};

/* y = x.flatten(start_dim, end_dim) */
static const struct dl_op_desc op_flatten = {
	.name = "flatten", .doc = "y = x.flatten(start_dim, end_dim)",
	.min_in = 1, .max_in = 1, .hp = flatten_hp, .n_hp = 2,
	.infer = flatten_infer, .forward = copy_fwd, .backward = copy_bwd,
	.flags = DL_OP_INPLACE_OK | DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

/* y = x.reshape(N, *shape), one size -1 inferred */
static const struct dl_op_desc op_reshape = {
	.name = "reshape", .doc = "y = x.reshape(N, *shape)",
	.min_in = 1, .max_in = 1, .hp = reshape_hp, .n_hp = 1,
	.infer = reshape_infer, .forward = copy_fwd, .backward = copy_bwd,
	.flags = DL_OP_INPLACE_OK | DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

/* y = x.permute(*dims), dims[0] = 0 */
static const struct dl_op_desc op_permute = {
	.name = "permute", .doc = "y = x.permute(*dims)",
	.min_in = 1, .max_in = 1, .hp = permute_hp, .n_hp = 1,
	.infer = permute_infer, .forward = permute_fwd, .backward = permute_bwd,
	.flags = DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

/* y = x.transpose(dim0, dim1), neither the batch dimension */
static const struct dl_op_desc op_transpose = {
	.name = "transpose", .doc = "y = x.transpose(dim0, dim1)",
	.min_in = 1, .max_in = 1, .hp = transpose_hp, .n_hp = 2,
	.infer = transpose_infer, .forward = permute_fwd, .backward = permute_bwd,
	.flags = DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

/* y = x[..., start:end:step, ...] along dim (Python slicing: bounds clamp) */
static const struct dl_op_desc op_slice = {
	.name = "slice", .doc = "y = x[..., start:end:step, ...] along dim",
	.min_in = 1, .max_in = 1, .hp = slice_hp, .n_hp = 4,
	.infer = slice_infer, .forward = slice_fwd, .backward = slice_bwd,
	.flags = DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

/* y = F.pad(x, padding, value=value): constant padding, negative crops */
static const struct dl_op_desc op_pad = {
	.name = "pad", .doc = "y = F.pad(x, padding, value=value)",
	.min_in = 1, .max_in = 1, .hp = pad_hp, .n_hp = 2,
	.infer = pad_infer, .forward = pad_fwd, .backward = pad_bwd,
	.flags = DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

/* y = torch.cat([x1, x2, ...], dim) */
static const struct dl_op_desc op_concat = {
	.name = "concat", .doc = "y = torch.cat([x1, x2, ...], dim)",
	.min_in = 2, .max_in = -1, .hp = concat_hp, .n_hp = 1,
	.infer = concat_infer, .forward = concat_fwd, .backward = concat_bwd,
	.flags = DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

const struct dl_op_desc *const dl_ops_shape[] = {
	&op_identity, &op_flatten, &op_reshape, &op_permute, &op_transpose,
	&op_slice, &op_pad, &op_concat, NULL,
};
