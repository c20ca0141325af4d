/* NumPy broadcasting of elementwise ops, shared by the arithmetic
 * (elementwise.c) and the comparisons, logical ops, where and expand
 * (compare.c, expand.c): shape inference and a plan of strides. */
#ifndef DL_BCAST_H
#define DL_BCAST_H

#include <stddef.h>
#include <stdint.h>

#include "engine/op.h"

/* The output's dimensions after dropping size-1 dimensions and merging
 * neighbours that every input walks the same way; st (in ctx->ws, [K *
 * DL_MAX_DIMS]) holds each input's element strides over them, 0 where it is
 * broadcast. Rows are all dimensions but the last, which is `inner`. */
struct bcast {
	int nd, K;
	int64_t d[DL_MAX_DIMS];
	int64_t rows, inner;
	int64_t *st;
};

/* Plans inputs in[0..K) broadcast to out; st has room for K *
 * DL_MAX_DIMS strides. */
void dl_bcast_plan(struct bcast *p, int64_t *st, const struct dl_tensor *in,
		   int K, const struct dl_shape *out);

/* Shape inference of n->n_in broadcast inputs: batch sizes equal or 1,
 * per-sample shapes aligned from the right. ws_bytes: the strides of
 * dl_bcast_plan, then one double per element of the largest broadcast
 * input (an accumulator for its gradient). */
int dl_bcast_infer(struct dl_node *n, const struct dl_shape *in,
		   struct dl_shape *out, struct dl_error *err);

/* Row r's index over the plan's leading dimensions. */
static inline void bcast_row(const struct bcast *p, int64_t r, int64_t *idx)
{
	for (int i = p->nd - 2; i >= 0; i--) {
		idx[i] = r % p->d[i];
		r /= p->d[i];
	}
}

/* The offset of element j of row idx in input k. */
static inline int64_t bcast_off(const struct bcast *p, int k,
				const int64_t *idx, int64_t j)
{
	const int64_t *sk = p->st + (size_t)k * DL_MAX_DIMS;
	int64_t off = j * sk[p->nd - 1];
	for (int i = 0; i < p->nd - 1; i++)
		off += idx[i] * sk[i];
	return off;
}

/* Input k's stride along a row (0: broadcast). */
static inline int64_t bcast_inner_stride(const struct bcast *p, int k)
{
	return p->st[(size_t)k * DL_MAX_DIMS + p->nd - 1];
}

#endif
