/* Comparisons (eq, ne, lt, le, gt, ge), logical ops (logical_not,
 * logical_and, logical_or) and where, broadcast as the arithmetic ops
 * (ops/bcast.h). Comparisons and logical ops give 0/1 floats and pass no
 * gradient (a mask built from data never blocks training); where passes
 * dout to the input it picked, summed over the dimensions it was broadcast
 * along, and nothing to the condition. macs: one per output element. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "engine/op.h"
#include "engine/stepper.h"
#include "ops/bcast.h"

enum cmp_kind { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_AND, CMP_OR };

/* 1 or 0: a op b; NaN compares false except with ne, and is nonzero
 * (true) for the logical ops, as PyTorch's bool conversion */
static inline float cmp_value(enum cmp_kind kind, float a, float b)
{
	switch (kind) {
	case CMP_EQ: return a == b;
	case CMP_NE: return a != b;
	case CMP_LT: return a < b;
	case CMP_LE: return a <= b;
	case CMP_GT: return a > b;
	case CMP_GE: return a >= b;
	case CMP_AND: return a != 0.0f && b != 0.0f;
	case CMP_OR: return a != 0.0f || b != 0.0f;
	}
	return 0.0f;
}

/* out = a op b, broadcast by p */
static void cmp_forward(enum cmp_kind kind, float *out, const struct dl_tensor *in,
			const struct bcast *p)
{
	int64_t sa = bcast_inner_stride(p, 0), sb = bcast_inner_stride(p, 1);
#pragma omp parallel for if (p->rows * p->inner > 32768) schedule(static)
	for (int64_t r = 0; r < p->rows; r++) {
		int64_t idx[DL_MAX_DIMS];
		bcast_row(p, r, idx);
		const float *a = in[0].data + bcast_off(p, 0, idx, 0);
		const float *b = in[1].data + bcast_off(p, 1, idx, 0);
		float *o = out + r * p->inner;
		for (int64_t j = 0; j < p->inner; j++)
			o[j] = cmp_value(kind, a[j * sa], b[j * sb]);
	}
}

/* out = c != 0 ? a : b, broadcast by p (c NaN counts as nonzero) */
static void where_forward(float *out, const struct dl_tensor *in, const struct bcast *p)
{
	int64_t sc = bcast_inner_stride(p, 0), sa = bcast_inner_stride(p, 1);
	int64_t sb = bcast_inner_stride(p, 2);
#pragma omp parallel for if (p->rows * p->inner > 32768) schedule(static)
	for (int64_t r = 0; r < p->rows; r++) {
		int64_t idx[DL_MAX_DIMS];
		bcast_row(p, r, idx);
		const float *c = in[0].data + bcast_off(p, 0, idx, 0);
		const float *a = in[1].data + bcast_off(p, 1, idx, 0);
		const float *b = in[2].data + bcast_off(p, 2, idx, 0);
		float *o = out + r * p->inner;
		for (int64_t j = 0; j < p->inner; j++)
			o[j] = c[j * sc] != 0.0f ? a[j * sa] : b[j * sb];
	}
}

/* dx_k += dout where the condition picks input k (k = 1: c != 0, k = 2:
 * c == 0), summed in the doubles acc over the dimensions x_k was
 * broadcast along */
static void where_backward(float *dx, double *acc, int k, const float *dout,
			   const struct dl_tensor *in, const struct bcast *p)
{
	int64_t nk = dl_shape_numel(&in[k].shape), total = p->rows * p->inner;
	int64_t sc = bcast_inner_stride(p, 0), sk = bcast_inner_stride(p, k);
	int pick = k == 1;
	if (nk == total) {
		/* not broadcast: each element of dx is one of dout */
		for (int64_t r = 0; r < p->rows; r++) {
			int64_t idx[DL_MAX_DIMS];
			bcast_row(p, r, idx);
			const float *c = in[0].data + bcast_off(p, 0, idx, 0);
			float *d = dx + bcast_off(p, k, idx, 0);
			const float *g = dout + r * p->inner;
			for (int64_t j = 0; j < p->inner; j++)
				if ((c[j * sc] != 0.0f) == pick)
					d[j * sk] += g[j];
		}
		return;
	}
	for (int64_t i = 0; i < nk; i++)
		acc[i] = 0.0;
	for (int64_t r = 0; r < p->rows; r++) {
		int64_t idx[DL_MAX_DIMS];
		bcast_row(p, r, idx);
		const float *c = in[0].data + bcast_off(p, 0, idx, 0);
		double *d = acc + bcast_off(p, k, idx, 0);
		const float *g = dout + r * p->inner;
		for (int64_t j = 0; j < p->inner; j++)
			if ((c[j * sc] != 0.0f) == pick)
				d[j * sk] += g[j];
	}
	for (int64_t i = 0; i < nk; i++)
		dx[i] += (float)acc[i];
}

/* ---- the ops ---- */

static const struct dl_op_desc op_eq, op_ne, op_lt, op_le, op_gt, op_ge;
static const struct dl_op_desc op_logical_and, op_logical_or;

static enum cmp_kind cmp_kind_of(const struct dl_op_desc *op)
{
	if (op == &op_ne)
		return CMP_NE;
	if (op == &op_lt)
		return CMP_LT;
	if (op == &op_le)
		return CMP_LE;
	if (op == &op_gt)
		return CMP_GT;
	if (op == &op_ge)
		return CMP_GE;
	if (op == &op_logical_and)
		return CMP_AND;
	if (op == &op_logical_or)
		return CMP_OR;
	return CMP_EQ;
}

static void cmp_fwd(struct dl_node *n, const struct dl_tensor *in,
		    struct dl_tensor *out, struct dl_ctx *ctx)
{
	if (dl_shape_numel(&out->shape) == 0)
		return;
	struct bcast p;
	dl_bcast_plan(&p, ctx->ws, in, n->n_in, &out->shape);
	cmp_forward(cmp_kind_of(n->op), out->data, in, &p);
}

/* piecewise constant: the gradient is zero almost everywhere */
static void no_grad_bwd(struct dl_node *n, const struct dl_tensor *in,
			const struct dl_tensor *out, const float *dout,
			float *const *din, struct dl_ctx *ctx)
{
	(void)n;
	(void)in;
	(void)out;
	(void)dout;
	(void)din;
	(void)ctx;
}

static int not_infer(struct dl_node *n, const struct dl_shape *in,
		     struct dl_shape *out, struct dl_error *err)
{
	(void)err;
	*out = in[0];
	n->ws_bytes = 0;
	n->saved_bytes = 0;
	n->macs = dl_shape_numel(&in[0]);
	return 0;
}

static void not_fwd(struct dl_node *n, const struct dl_tensor *in,
		    struct dl_tensor *out, struct dl_ctx *ctx)
{
	int64_t len = dl_shape_numel(&in[0].shape);
	const float *x = in[0].data;
	(void)n;
	(void)ctx;
	for (int64_t i = 0; i < len; i++)
		out->data[i] = x[i] == 0.0f;
}

static int where_infer(struct dl_node *n, const struct dl_shape *in,
		       struct dl_shape *out, struct dl_error *err)
{
	int rc = dl_bcast_infer(n, in, out, err);
	n->macs = dl_shape_numel(out);
	return rc;
}

static void where_fwd(struct dl_node *n, const struct dl_tensor *in,
		      struct dl_tensor *out, struct dl_ctx *ctx)
{
	if (dl_shape_numel(&out->shape) == 0)
		return;
	struct bcast p;
	dl_bcast_plan(&p, ctx->ws, in, n->n_in, &out->shape);
	where_forward(out->data, in, &p);
}

static void where_bwd(struct dl_node *n, const struct dl_tensor *in,
		      const struct dl_tensor *out, const float *dout,
		      float *const *din, struct dl_ctx *ctx)
{
	if (dl_shape_numel(&out->shape) == 0)
		return;
	struct bcast p;
	int64_t *st = ctx->ws;
	dl_bcast_plan(&p, st, in, n->n_in, &out->shape);
	double *acc = (double *)(st + (size_t)n->n_in * DL_MAX_DIMS);
	for (int k = 1; k < 3; k++)
		if (din[k])
			where_backward(din[k], acc, k, dout, in, &p);
}

/* the fields every comparison shares */
#define CMP2 .min_in = 2, .max_in = 2, .infer = dl_bcast_infer, \
	.forward = cmp_fwd, .backward = no_grad_bwd, .step = dl_step_pointwise, \
	.flags = DL_OP_INPLACE_OK | DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT

/* y = (a == b) as 0/1 (broadcast); no gradient */
static const struct dl_op_desc op_eq = {
	.name = "eq", .doc = "y = (a == b) as 0/1 floats (broadcast; no gradient)", CMP2,
};

/* y = (a != b) as 0/1 (broadcast); no gradient */
static const struct dl_op_desc op_ne = {
	.name = "ne", .doc = "y = (a != b) as 0/1 floats (broadcast; no gradient)", CMP2,
};

/* y = (a < b) as 0/1 (broadcast); no gradient */
static const struct dl_op_desc op_lt = {
	.name = "lt", .doc = "y = (a < b) as 0/1 floats (broadcast; no gradient)", CMP2,
};

/* y = (a <= b) as 0/1 (broadcast); no gradient */
static const struct dl_op_desc op_le = {
	.name = "le", .doc = "y = (a <= b) as 0/1 floats (broadcast; no gradient)", CMP2,
};

/* y = (a > b) as 0/1 (broadcast); no gradient */
static const struct dl_op_desc op_gt = {
	.name = "gt", .doc = "y = (a > b) as 0/1 floats (broadcast; no gradient)", CMP2,
};

/* y = (a >= b) as 0/1 (broadcast); no gradient */
static const struct dl_op_desc op_ge = {
	.name = "ge", .doc = "y = (a >= b) as 0/1 floats (broadcast; no gradient)", CMP2,
};

/* y = (x == 0) as 0/1; no gradient */
static const struct dl_op_desc op_logical_not = {
	.name = "logical_not", .doc = "y = (x == 0) as 0/1 floats (no gradient)",
	.min_in = 1, .max_in = 1, .infer = not_infer, .forward = not_fwd,
	.backward = no_grad_bwd, .step = dl_step_pointwise,
	.flags = DL_OP_INPLACE_OK | DL_OP_BWD_NO_INPUTS | DL_OP_BWD_NO_OUTPUT,
};

/* y = (a != 0 and b != 0) as 0/1 (broadcast); no gradient */
static const struct dl_op_desc op_logical_and = {
	.name = "logical_and", .doc = "y = (a != 0 and b != 0) as 0/1 floats (broadcast; no gradient)",
	CMP2,
};

/* y = (a != 0 or b != 0) as 0/1 (broadcast); no gradient */
static const struct dl_op_desc op_logical_or = {
	.name = "logical_or", .doc = "y = (a != 0 or b != 0) as 0/1 floats (broadcast; no gradient)",
	CMP2,
};

/* y = cond != 0 ? a : b (broadcast); da, db: dout where picked, summed
 * over broadcast dimensions; no gradient to cond */
static const struct dl_op_desc op_where = {
	.name = "where", .doc = "y = a where cond != 0 else b, in: [cond, a, b] (broadcast)",
	.min_in = 3, .max_in = 3, .infer = where_infer, .forward = where_fwd,
	.backward = where_bwd, .flags = DL_OP_BWD_NO_OUTPUT,
	.step = dl_step_pointwise,
};

const struct dl_op_desc *const dl_ops_compare[] = {
	&op_where, &op_eq, &op_ne, &op_lt, &op_le, &op_gt, &op_ge,
	&op_logical_not, &op_logical_and, &op_logical_or, NULL,
};
