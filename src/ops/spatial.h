/* What the convolution-like op families share: the vectorised-clone
 * attribute for hot loops, bounded spatial tuples, and padding resolution
 * in all the forms of model-format.md (int, list, same, valid, pairs). */
#ifndef DL_SPATIAL_H
#define DL_SPATIAL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/op.h"
#include "engine/vmath.h"   /* DL_CLONES, for the hot loops */

/* Every spatial size, kernel, stride, dilation and padding stays below
 * this, so index arithmetic on them never overflows. */
#define GEOM_MAX ((int64_t)1 << 30)

/* The INTS hyperparameter hp as nsp values, each below GEOM_MAX. */
int dl_spatial_tuple(const struct dl_node *n, int hp, int nsp, int64_t *v,
		     struct dl_error *err);

/* Padding before (pb) and after (pa) each of the nsp spatial dimensions of
 * sizes L, for kernel k, stride s and dilation d, from the PADDING
 * hyperparameter hp. `same` pads like ONNX's SAME_UPPER: output
 * ceil(L / s), the odd cell after. */
int dl_spatial_padding(const struct dl_node *n, int hp, int nsp,
		       const int64_t *L, const int64_t *k, const int64_t *s,
		       const int64_t *d, int64_t *pb, int64_t *pa,
		       struct dl_error *err);

/* "[N, C, L]", "[N, C, H, W]" or "[N, C, D, H, W]": the input layout,
 * for messages. */
const char *dl_spatial_layout(int nsp);
/* "4x7x5" for the three sizes v, into buf; returns buf. */
const char *dl_spatial_dims3(char *buf, size_t size, const int64_t *v);
/* 0 when the kernel k dilated by d fits each of the three padded sizes
 * L + pb + pa; else the error at hyperparameter hp (the kernel's):
 * "kernel_size 3x8x3 is larger than the padded input 4x7x5". */
int dl_spatial_fits3(const struct dl_node *n, int hp, const int64_t *L, const int64_t *k,
		     const int64_t *d, const int64_t *pb, const int64_t *pa,
		     struct dl_error *err);
/* "5x7" for 2D sizes (a, b), "7" for 1D (b), into buf; returns buf. */
const char *dl_spatial_dims(char *buf, size_t size, int nsp, int64_t a,
			    int64_t b);

/* The range [lo, hi) of output columns ow in [0, OW) whose input column
 * ow * s + off falls inside [0, W). */
static inline void dl_col_range(int64_t OW, int64_t W, int64_t s, int64_t off,
				int64_t *lo, int64_t *hi)
{
	/* ow * s + off >= 0  <=>  ow >= ceil(-off / s) */
	int64_t l = off >= 0 ? 0 : (-off + s - 1) / s;
	/* ow * s + off <= W - 1  <=>  ow <= floor((W - 1 - off) / s) */
	int64_t h = W - 1 - off < 0 ? -1 : (W - 1 - off) / s;
	if (h > OW - 1)
		h = OW - 1;
	*lo = l;
	*hi = h + 1 > l ? h + 1 : l;
}

/* The threads a conv1d, conv2d or transposed node runs its forward on for
 * input shape x (src/ops/conv.c), or -1 when x does not fit it: for the
 * tests of its rules. */
int dl_conv_forward_threads(const struct dl_node *n, const struct dl_shape *x);

/* The images per GEMM of the node's backward for input shape x (0: one
 * per image; -1: x does not fit it), for the tests of that rule. */
int64_t dl_conv_backward_group(const struct dl_node *n, const struct dl_shape *x);

/* 1 when the node's backward for input shape x runs its products on
 * dl_sgemm_rows (src/ops/conv.c bwd_xtra_floats: a CPU with 512-bit FMA
 * units, or the tests' dl_sgemm_rows_wide_set, and room in the plan),
 * 0 on OpenBLAS, -1 when x does not fit it: for the tests. */
int dl_conv_backward_rows(const struct dl_node *n, const struct dl_shape *x);

/* The threads the node's backward computes its data gradient on as a
 * Winograd convolution (src/ops/conv.c, adjoint_of; 0: by the GEMM and
 * col2im; -1: x does not fit it), for the tests of that rule. */
int dl_conv_backward_adjoint(const struct dl_node *n, const struct dl_shape *x);

#endif
