/* Dense products: linear (x W^T + b over the last dimension) and matmul
 * (batched matrix products with broadcast batch dimensions). Every product
 * goes through dl_sgemm. macs: the multiply-adds of the products. */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "engine/gemm.h"
#include "engine/fuse.h"
#include "engine/op.h"
#include "engine/stepper.h"
#include "engine/xwt.h"

#define PAR_MIN 32768 /* elements below which a loop stays serial */

/* ---- linear ---- */

/* out[M, O] = inp[M, I] weight[O, I]^T + bias[O]; M = all leading dims.
 * With xwt (fixed weights) the weight is packed once (engine/xwt.h). */
static void linear_forward(float *out, const float *inp, float *weight,
			   const float *bias, int M, int I, int O,
			   struct dl_xwt_set *xwt)
{
	dl_xwt(xwt, out, inp, I, M, I, weight, O);
	if (!bias)
		return;
	/* simd: out and bias may alias for all GCC knows, and -O2 does not
	 * vectorise a loop that needs a check for it (addss, 1% of a
	 * GPT-2-shaped decoder's forward) */
#pragma omp parallel for if ((int64_t)M * O > PAR_MIN)
	for (int m = 0; m < M; m++) {
		float *o = out + (int64_t)m * O;
#pragma omp simd
		for (int j = 0; j < O; j++)
			o[j] += bias[j];
	}
}

/* dinp[M, I] += dout[M, O] weight[O, I]; dweight[O, I] += dout^T inp;
 * dbias[O] += column sums of dout, accumulated in acc[O] (double). */
static void linear_backward(float *dinp, float *dweight, float *dbias,
			    const float *dout, const float *inp,
			    const float *weight, double *acc, int M, int I,
			    int O)
{
	if (dinp)
		dl_sgemm(0, 0, M, I, O, 1.0f, dout, O, weight, I, 1.0f, dinp, I);
	if (dweight)
		dl_sgemm(1, 0, O, I, M, 1.0f, dout, O, inp, I, 1.0f, dweight, I);
	if (dbias) {
		for (int j = 0; j < O; j++)
			acc[j] = 0.0;
		for (int m = 0; m < M; m++) {
			const float *g = dout + (int64_t)m * O;
			for (int j = 0; j < O; j++)
				acc[j] += g[j];
		}
		for (int j = 0; j < O; j++)
			dbias[j] += (float)acc[j];
	}
}

enum { LIN_IN, LIN_OUT, LIN_BIAS };

static const struct dl_hp_desc linear_hp[] = {
	[LIN_IN] = {"in_features", DL_HP_INT, "inferred", NULL,
		    DL_HP_DERIVED | DL_HP_POSITIVE},
	[LIN_OUT] = {"out_features", DL_HP_INT, NULL, NULL,
		     DL_HP_REQUIRED | DL_HP_POSITIVE},
	[LIN_BIAS] = {"bias", DL_HP_BOOL, "true", NULL, 0},
};

static int linear_infer(struct dl_node *n, const struct dl_shape *in,
			struct dl_shape *out, struct dl_error *err)
{
	char s[128];
	const struct dl_shape *x = &in[0];
	if (x->ndim < 2)
		return dl_node_error(err, n, -1,
			"the input has shape %s; linear needs features per sample ([N, ..., in_features])",
			dl_shape_str(x, s, sizeof s));
	int64_t I = x->d[x->ndim - 1];
	int64_t O = n->hp[LIN_OUT].i;
	if (n->hp[LIN_IN].set && n->hp[LIN_IN].i != I)
		return dl_node_error(err, n, LIN_IN,
			"in_features is %lld but the input %s has %lld features",
			(long long)n->hp[LIN_IN].i, dl_shape_str(x, s, sizeof s),
			(long long)I);
	if (I <= 0)
		return dl_node_error(err, n, -1,
			"the input %s has no features in its last dimension",
			dl_shape_str(x, s, sizeof s));
	int64_t M = dl_shape_prod(x, 0, x->ndim - 1);
	if (O > INT_MAX || (double)O * (double)I > (double)DL_MAX_NUMEL)
		return dl_node_error(err, n, LIN_OUT,
			"out_features %lld is too large (the weight [%lld, %lld] must "
			"have fewer than 2^31 rows and at most 2^40 elements)",
			(long long)O, (long long)O, (long long)I);
	if (I > INT_MAX || M > INT_MAX ||
	    (double)M * (double)(I > O ? I : O) > (double)DL_MAX_NUMEL)
		return dl_node_error(err, n, -1, "the input %s is too large",
				     dl_shape_str(x, s, sizeof s));
	double bound = 1.0 / sqrt((double)I);
	int64_t wd[2] = {O, I};
	struct dl_shape ws = dl_shape_make(2, wd);
	int rc = dl_node_param(n, "weight", &ws, DL_INIT_UNIFORM, bound, err);
	if (rc < 0)
		return rc;
	if (n->hp[LIN_BIAS].i) {
		struct dl_shape bs = dl_shape_make(1, &O);
		rc = dl_node_param(n, "bias", &bs, DL_INIT_UNIFORM, bound, err);
		if (rc < 0)
			return rc;
	}
	*out = *x;
	out->d[out->ndim - 1] = O;
	n->ws_bytes = (size_t)O * sizeof(double);
	n->saved_bytes = 0;
	n->macs = M * I * O;
	return 0;
}

static void linear_fwd(struct dl_node *n, const struct dl_tensor *in,
		       struct dl_tensor *out, struct dl_ctx *ctx)
{
	const struct dl_shape *x = &in[0].shape;
	int I = (int)x->d[x->ndim - 1];
	int O = (int)n->params[0].shape.d[0];
	int M = (int)dl_shape_prod(x, 0, x->ndim - 1);
	/* a fused epilogue (engine/fuse.c) adds the bias itself */
	const struct dl_epilogue *e = ctx->train ? NULL : n->epi;
	linear_forward(out->data, in[0].data, n->params[0].data,
		       n->n_params > 1 && !e ? n->params[1].data : NULL, M, I, O,
		       ctx->train ? NULL : ctx->xwt);
	if (e)
		dl_epilogue_cols(e, out->data, e->resp, M, O);
}

static void linear_bwd(struct dl_node *n, const struct dl_tensor *in,
		       const struct dl_tensor *out, const float *dout,
		       float *const *din, struct dl_ctx *ctx)
{
	const struct dl_shape *x = &in[0].shape;
	int I = (int)x->d[x->ndim - 1];
	int O = (int)n->params[0].shape.d[0];
	int M = (int)dl_shape_prod(x, 0, x->ndim - 1);
	linear_backward(din[0], n->params[0].grad,
			n->n_params > 1 ? n->params[1].grad : NULL, dout,
			in[0].data, n->params[0].data, ctx->ws, M, I, O);
}

/* y = x W^T + b over the last dimension; W [out, in] ~ U(+-1/sqrt(in)),
 * b [out] ~ U(+-1/sqrt(in)) (PyTorch's nn.Linear) */
static const struct dl_op_desc op_linear = {
	.name = "linear",
	.doc = "y = x W^T + b over the last dimension",
	.min_in = 1, .max_in = 1,
	.hp = linear_hp, .n_hp = 3,
	.infer = linear_infer,
	.forward = linear_fwd,
	.backward = linear_bwd,
	.params = "weight [out_features, in_features], bias [out_features]",
	.flags = DL_OP_BWD_NO_OUTPUT,
	.step = dl_step_rows,
	.fuse = DL_FUSE_HEAD_ROWS,
};

/* ---- matmul ---- */

/* The batch dimensions of out [N, b..., M, P] and the strides, in
 * matrices, of a [Na, a..., M, K] and b [Nb, b..., K, P] over them (0 where
 * broadcast). The sample dimension is matched on its own; the per-sample
 * batch dimensions align from the right, as NumPy's. Returns the count. */
static int matmul_batch(const struct dl_shape *a, const struct dl_shape *b,
			const struct dl_shape *o, int64_t *bd, int64_t *sa,
			int64_t *sb)
{
	int nb = o->ndim - 2;
	int64_t ta = 1, tb = 1;
	for (int i = nb - 1; i >= 1; i--) {
		int ja = a->ndim - 2 - (nb - i), jb = b->ndim - 2 - (nb - i);
		int64_t da = ja >= 1 ? a->d[ja] : 1, db = jb >= 1 ? b->d[jb] : 1;
		bd[i] = o->d[i];
		sa[i] = da == 1 ? 0 : ta;
		sb[i] = db == 1 ? 0 : tb;
		ta *= da;
		tb *= db;
	}
	bd[0] = o->d[0];
	sa[0] = a->d[0] == 1 ? 0 : ta;
	sb[0] = b->d[0] == 1 ? 0 : tb;
	return nb;
}

/* Offsets (in matrices) of batch t in a and b. */
static void matmul_offsets(int64_t t, int nb, const int64_t *bd,
			   const int64_t *sa, const int64_t *sb, int64_t *oa,
			   int64_t *ob)
{
	*oa = 0;
	*ob = 0;
	for (int i = nb - 1; i >= 0; i--) {
		int64_t k = t % bd[i];
		t /= bd[i];
		*oa += k * sa[i];
		*ob += k * sb[i];
	}
}

/* out[t] [M, P] = a[t] [M, K] b[t] [K, P] for each of B batches */
static void matmul_forward(float *out, const float *a, const float *b,
			   int64_t B, int nb, const int64_t *bd,
			   const int64_t *sa, const int64_t *sb, int M, int K,
			   int P)
{
	for (int64_t t = 0; t < B; t++) {
		int64_t oa, ob;
		matmul_offsets(t, nb, bd, sa, sb, &oa, &ob);
		dl_sgemm(0, 0, M, P, K, 1.0f, a + oa * M * K, K, b + ob * K * P,
			 P, 0.0f, out + t * M * P, P);
	}
}

/* da[t] += dout[t] b[t]^T; db[t] += a[t]^T dout[t]. Broadcast batches add
 * into the same block, in order. */
static void matmul_backward(float *da, float *db, const float *dout,
			    const float *a, const float *b, int64_t B, int nb,
			    const int64_t *bd, const int64_t *sa,
			    const int64_t *sb, int M, int K, int P)
{
	for (int64_t t = 0; t < B; t++) {
		int64_t oa, ob;
		matmul_offsets(t, nb, bd, sa, sb, &oa, &ob);
		const float *g = dout + t * M * P;
		if (da)
			dl_sgemm(0, 1, M, K, P, 1.0f, g, P, b + ob * K * P, P,
				 1.0f, da + oa * M * K, K);
		if (db)
			dl_sgemm(1, 0, K, P, M, 1.0f, a + oa * M * K, K, g, P,
				 1.0f, db + ob * K * P, P);
	}
}

static int matmul_infer(struct dl_node *n, const struct dl_shape *in,
			struct dl_shape *out, struct dl_error *err)
{
	char s[128], t[128];
	const struct dl_shape *a = &in[0], *b = &in[1];
	for (int k = 0; k < 2; k++)
		if (in[k].ndim < 3)
			return dl_node_error(err, n, -1,
				"input %d has shape %s; matmul needs a matrix per sample ([N, ..., rows, cols])",
				k + 1, dl_shape_str(&in[k], s, sizeof s));
	int64_t M = a->d[a->ndim - 2], K = a->d[a->ndim - 1];
	int64_t K2 = b->d[b->ndim - 2], P = b->d[b->ndim - 1];
	if (K != K2)
		return dl_node_error(err, n, -1,
			"cannot multiply %s by %s: the first input's last dimension (%lld) must equal the second's next-to-last (%lld)",
			dl_shape_str(a, s, sizeof s), dl_shape_str(b, t, sizeof t),
			(long long)K, (long long)K2);
	if (a->d[0] != b->d[0] && a->d[0] != 1 && b->d[0] != 1)
		return dl_node_error(err, n, -1,
			"the inputs have batch sizes %lld and %lld; they must be equal or one of them 1",
			(long long)a->d[0], (long long)b->d[0]);
	int pa = a->ndim - 3, pb = b->ndim - 3;
	int nb = 1 + (pa > pb ? pa : pb);
	struct dl_shape o;
	memset(&o, 0, sizeof o);
	o.ndim = nb + 2;
	o.d[0] = a->d[0] == 1 ? b->d[0] : a->d[0];
	for (int i = 1; i < nb; i++) {
		int ja = a->ndim - 2 - (nb - i), jb = b->ndim - 2 - (nb - i);
		int64_t da = ja >= 1 ? a->d[ja] : 1, db = jb >= 1 ? b->d[jb] : 1;
		if (da != db && da != 1 && db != 1)
			return dl_node_error(err, n, -1,
				"cannot multiply %s by %s: batch dimensions %lld and %lld do not broadcast (aligned from the right, each must be equal or 1)",
				dl_shape_str(a, s, sizeof s),
				dl_shape_str(b, t, sizeof t), (long long)da,
				(long long)db);
		o.d[i] = da == 1 ? db : da;
	}
	o.d[nb] = M;
	o.d[nb + 1] = P;
	int64_t numel = dl_shape_numel(&o);
	if (numel < 0 || M > INT_MAX || K > INT_MAX || P > INT_MAX)
		return dl_node_error(err, n, -1, "the product of %s and %s is too large",
				     dl_shape_str(a, s, sizeof s),
				     dl_shape_str(b, t, sizeof t));
	*out = o;
	n->ws_bytes = 0;
	n->saved_bytes = 0;
	n->macs = dl_shape_prod(&o, 0, nb) * M * P * K;
	return 0;
}

static void matmul_fwd(struct dl_node *n, const struct dl_tensor *in,
		       struct dl_tensor *out, struct dl_ctx *ctx)
{
	int64_t bd[DL_MAX_DIMS], sa[DL_MAX_DIMS], sb[DL_MAX_DIMS];
	const struct dl_shape *a = &in[0].shape, *o = &out->shape;
	int nb = matmul_batch(a, &in[1].shape, o, bd, sa, sb);
	int M = (int)o->d[nb], P = (int)o->d[nb + 1], K = (int)a->d[a->ndim - 1];
	matmul_forward(out->data, in[0].data, in[1].data, dl_shape_prod(o, 0, nb),
		       nb, bd, sa, sb, M, K, P);
}

static void matmul_bwd(struct dl_node *n, const struct dl_tensor *in,
		       const struct dl_tensor *out, const float *dout,
		       float *const *din, struct dl_ctx *ctx)
{
	int64_t bd[DL_MAX_DIMS], sa[DL_MAX_DIMS], sb[DL_MAX_DIMS];
	const struct dl_shape *a = &in[0].shape, *o = &out->shape;
	int nb = matmul_batch(a, &in[1].shape, o, bd, sa, sb);
	int M = (int)o->d[nb], P = (int)o->d[nb + 1], K = (int)a->d[a->ndim - 1];
	matmul_backward(din[0], din[1], dout, in[0].data, in[1].data,
			dl_shape_prod(o, 0, nb), nb, bd, sa, sb, M, K, P);
}

/* C[n, ..., M, P] = A[n, ..., M, K] B[n, ..., K, P]: torch.matmul on
 * matrices; batch sizes equal or 1, per-sample batch dims broadcast from
 * the right. Unlike torch.matmul on the full tensors, the sample dimension
 * is matched on its own when the ranks differ (as for add and mul), so
 * [N, H, T, D] x [N, D, E] is torch.matmul(a, b.unsqueeze(1)): samples never
 * mix. With equal ranks the two agree. */
static const struct dl_op_desc op_matmul = {
	.name = "matmul",
	.doc = "C = A B, batched over leading dimensions (broadcast)",
	.min_in = 2, .max_in = 2,
	.hp = NULL, .n_hp = 0,
	.infer = matmul_infer,
	.forward = matmul_fwd,
	.backward = matmul_bwd,
	.flags = DL_OP_BWD_NO_OUTPUT,
};

const struct dl_op_desc *const dl_ops_linear[] = {&op_linear, &op_matmul, NULL};
