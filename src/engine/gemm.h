/* The one matrix-product entry point: every GEMM-shaped computation goes
 * through dl_sgemm (CBLAS), so threading and any future kernel choice live
 * in one place. dl_sgemm_ref is the naive reference the tests compare with. */
#ifndef DL_GEMM_H
#define DL_GEMM_H

#include <stdint.h>

/* Row-major C[M, N] = alpha * op(A) op(B) + beta * C, with op(A) [M, K]
 * (A stored [K, M] when ta), op(B) [K, N] (B stored [N, K] when tb). */
void dl_sgemm(int ta, int tb, int M, int N, int K, float alpha,
	      const float *A, int lda, const float *B, int ldb, float beta,
	      float *C, int ldc);
/* While on, dl_sgemm never shares one product among threads: for callers
 * whose loop already shares its units among them (set and cleared by the
 * caller outside its parallel region). */
void dl_sgemm_whole(int on);
/* How many blocks dl_sgemm would cut an M x N x K product into, called
 * here (1: it runs whole, on the calling thread): for the tests. */
int dl_sgemm_blocks(int M, int N, int K);
/* Products of few columns (N <= DL_SKINNY_N) as dot products:
 * C[m, n] = A[m, :] . Bt[n, :] over K, C overwritten (alpha 1, beta 0).
 * OpenBLAS packs all of A for any product; a convolution on a 2x2 plane
 * at batch 1 ([512, 4608] weights times 4 columns) spent more time
 * packing its weights than multiplying. Measured against dl_sgemm, one
 * thread, weights in cache (the best of 30): [512, 4608] times 1, 4, 8,
 * 9 and 16 columns, 0.35x, 0.52x, 0.95x, 0.83x and 1.21x its time;
 * [256, 2304] times 4 and 16, 0.58x and 1.52x; hence at most 9 columns.
 * Each element's sum runs in one order whatever M, N and the rows a
 * caller gives it: 8 lanes over k, the lanes added pairwise, then the k
 * past the last whole vector. */
#define DL_SKINNY_N 9
void dl_sgemm_skinny(int M, int N, int K, const float *A, int lda, const float *Bt,
		     int ldb, float *C, int ldc);
/* Products whose bits do not depend on how they are cut: every element
 * of C[M, N] = A[M, K] op(B) is one chain of fused multiply-adds over
 * k = 0 .. K-1 from zero (AVX-512 or AVX2 vectors across columns, fmaf
 * elsewhere, all the same bits), so a caller may compute any rows or
 * columns, on any thread, and get the bits of the whole product.
 * OpenBLAS's do depend on it: splitting a [128, 128] x [128, 49] product
 * in two by rows or by columns changes the last bits of 10% to 29% of
 * its outputs. B ([K, N], or [N, K] when tb) is packed first
 * (dl_sgemm_rows_pack, into dl_sgemm_rows_floats(N, K) floats: panels of
 * DL_ROWS_W columns, k outermost); A is read in place. C overwritten
 * (alpha 1, beta 0); dl_sgemm_rows_add adds (beta 1): each element's
 * chain over k starts from zero and its sum is added to C (per block of
 * 256 k, in order, the same bits on every CPU), as OpenBLAS adds a
 * product's sums, not one chain continued from C's value, which in a
 * gradient summed over many calls adds every term to the large running
 * sum. */
#define DL_ROWS_W 16
int64_t dl_sgemm_rows_floats(int N, int K);
void dl_sgemm_rows_pack(float *P, int tb, const float *B, int ldb, int N, int K);
void dl_sgemm_rows(int M, int N, int K, const float *A, int lda, const float *P, float *C,
		   int ldc);
void dl_sgemm_rows_add(int M, int N, int K, const float *A, int lda, const float *P,
		       float *C, int ldc);
/* dl_sgemm_rows shared among the threads by blocks of panels, as
 * dl_sgemm shares its products (not inside a parallel region, nor while
 * dl_sgemm_whole is on, nor below its size): the same bits. */
void dl_sgemm_rows_shared(int M, int N, int K, const float *A, int lda, const float *P,
			  float *C, int ldc);
/* dst [cols, rows] (rows ldd apart) = src [rows, cols] (rows lds apart)
 * transposed, or += with add (one addition per element): 8 x 8 blocks in
 * registers where dl_sgemm_rows has AVX2 or better, the edges one float
 * at a time; dst and src do not overlap */
void dl_transpose(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
		  int64_t cols, int add);
/* The kernels dl_sgemm_rows uses now: 2 AVX-512, 1 AVX2, 0 plain. */
int dl_sgemm_rows_level(void);
/* For the tests: use the kernels of level `want` (0 plain, 1 AVX2, 2
 * AVX-512) or the best below it that this CPU has; -1 the CPU's best.
 * Returns the level now used. */
int dl_sgemm_rows_kernels(int want);
/* Whether products of many columns (im2col's wide tiles, pointwise
 * convolutions on large planes) should run on dl_sgemm_rows rather than
 * OpenBLAS: the AVX-512 kernels on a CPU whose FMA units are 512 bits
 * wide. AMD's family 19h (Zen 4) splits each 512-bit operation in two:
 * there dl_sgemm_rows took 1.02 and more of OpenBLAS's time from 196
 * columns; on family 1Ah (Zen 5) 0.60 to 0.75 of it, its packing
 * included (tools/bench/gemm_rows.c). */
int dl_sgemm_rows_wide(void);
/* For the tests: 1 prefer dl_sgemm_rows for many columns (with the
 * AVX-512 kernels only), 0 not, -1 the CPU's choice. Returns
 * dl_sgemm_rows_wide() after. */
int dl_sgemm_rows_wide_set(int want);
void dl_sgemm_ref(int ta, int tb, int M, int N, int K, float alpha,
		  const float *A, int lda, const float *B, int ldb, float beta,
		  float *C, int ldc);

#endif
