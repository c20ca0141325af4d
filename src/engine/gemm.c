/* The GEMM wrapper over CBLAS, the naive reference, and thread control. */
#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "config.h"
#include "engine/gemm.h"
#include "engine/op.h"
#include "engine/threads.h"
#include "engine/vmath.h"

/* Products below this many multiply-adds (about 0.3 ms of one core's
 * work) run on one thread: splitting them saves little, and waking an
 * OpenMP worker that has gone to sleep can cost a scheduler tick (4 ms),
 * as measured on a 2-vCPU KVM guest (the U-Net example at batch 1 took
 * 9 ms at 2 threads against 0.18 ms at one with a 2^18 threshold). */
#define SPLIT_MACS (1L << 22)

/* Rows of C per OpenBLAS call. OpenBLAS sizes its packed panel of a
 * row-major product's rows (its column-major N) to fill its whole
 * per-thread buffer: a product with 50257 rows (GPT-2's LM head weight
 * gradient, dout^T x) touched 62 MiB of it, outside every plan, where
 * 4096-row calls touch 5.5 MiB. The other operand is packed again per
 * call, 1/4096 of the multiply-adds (no slower, measured at 1 thread:
 * 0.93-1.18 s a product with 50257 rows or 4096-row calls, under load). */
#define ROWS_MAX 4096

/* Products of one row stay on sgemm, although OpenBLAS 0.3.21 packs the
 * whole weight for them (a 1280 x 1000 classifier at batch 1: 1.35 ms,
 * where sgemv takes a fraction): sgemv sums in another order, so a
 * sample's outputs would change in the last bit with the batch it came
 * in (--batch-size, text steps of one line, the API against the CLI:
 * tests/cli.sh and tests/api.sh compare them byte for byte). */
static void sgemm1(int ta, int tb, int M, int N, int K, float alpha,
		   const float *A, int lda, const float *B, int ldb, float beta,
		   float *C, int ldc)
{
	for (int lo = 0; lo < M; lo += ROWS_MAX) {
		int m = M - lo < ROWS_MAX ? M - lo : ROWS_MAX;
		cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
			    tb ? CblasTrans : CblasNoTrans, m, N, K, alpha,
			    ta ? A + lo : A + (long)lo * lda, lda, B, ldb, beta,
			    C + (long)lo * ldc, ldc);
	}
}

/* One threading runtime: OpenBLAS runs single-threaded (dl_set_threads)
 * and large products are cut into row or column blocks shared by OpenMP's
 * threads. With Debian's pthreads OpenBLAS threading on its own, its
 * threads and OpenMP's (which spin for a while after every parallel
 * region) fight over the cores, and a product can wait a whole scheduler
 * tick (4 ms) for a core. */
static _Thread_local int whole;  /* per caller thread: libdlrun runs models on several */

void dl_sgemm_whole(int on)
{
	whole = on;
}

/* The blocks of rows (by_rows) or columns, step long, that dl_sgemm cuts
 * an M x N x K product into on the calling thread now (cols: columns
 * only, as dl_sgemm_rows_shared's panels); 1: it runs whole. */
static int split_of(int M, int N, int K, int cols, int *by_rows, int *step)
{
#ifdef _OPENMP
	/* the blocks follow the thread count asked for, so the result's bits
	 * do not change when fewer threads run them (src/engine/threads.c).
	 * Inside any parallel region, an inactive one (a loop's `if` false,
	 * or a team of one) included, the product runs whole: a team nested
	 * in an inactive region gets fresh threads from pthread_create at
	 * every call, not the pool's (resnet18 224x224 at batch 1 and 2
	 * threads: 673 threads created in 23 forwards, one per split GEMM of
	 * the Winograd layers that had one unit of work) */
	int T = dl_threads();
	if (T > 1 && K > 0 && !whole && omp_get_level() == 0 &&
	    (long)M * N * K >= SPLIT_MACS &&
	    (cols ? N >= 2 * DL_ROWS_W : M >= 2 * T || N >= 2 * T)) {
		*by_rows = !cols && M >= N;
		int len = *by_rows ? M : N;
		/* keep blocks a multiple of 16 rows or columns (BLAS panels,
		 * dl_sgemm_rows's DL_ROWS_W) */
		*step = ((len + T - 1) / T + 15) / 16 * 16;
		return (len + *step - 1) / *step;
	}
#endif
	(void)M, (void)N, (void)K, (void)cols, (void)by_rows, (void)step;
	return 1;
}

/* dl_sgemm_rows on N columns of whole panels, cut into blocks of panels
 * by split_of's rule and shared among the threads. Any cut gives the
 * same bits. */
void dl_sgemm_rows_shared(int M, int N, int K, const float *A, int lda, const float *P,
			  float *C, int ldc)
{
	int by_rows, step;
	int blocks = split_of(M, N, K, 1, &by_rows, &step);
	if (blocks <= 1) {
		dl_sgemm_rows(M, N, K, A, lda, P, C, ldc);
		return;
	}
	int team = dl_threads_used() < blocks ? dl_threads_used() : blocks;
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
	for (int b = 0; b < blocks; b++) {
		int lo = b * step, n = N - lo < step ? N - lo : step;
		dl_sgemm_rows(M, n, K, A, lda, P + (int64_t)lo * K, C + lo, ldc);
	}
}

int dl_sgemm_blocks(int M, int N, int K)
{
	int by_rows, step;
	return split_of(M, N, K, 0, &by_rows, &step);
}

void dl_sgemm(int ta, int tb, int M, int N, int K, float alpha,
	      const float *A, int lda, const float *B, int ldb, float beta,
	      float *C, int ldc)
{
	if (M <= 0 || N <= 0)
		return;
	int by_rows, step;
	int blocks = split_of(M, N, K, 0, &by_rows, &step);
	if (blocks > 1) {
		int len = by_rows ? M : N;
		int team = dl_threads_used() < blocks ? dl_threads_used() : blocks;
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
		for (int b = 0; b < blocks; b++) {
			int lo = b * step, n = len - lo < step ? len - lo : step;
			if (by_rows)
				sgemm1(ta, tb, n, N, K, alpha,
				       ta ? A + lo : A + (long)lo * lda, lda, B, ldb,
				       beta, C + (long)lo * ldc, ldc);
			else
				sgemm1(ta, tb, M, n, K, alpha, A, lda,
				       tb ? B + (long)lo * ldb : B + lo, ldb, beta,
				       C + lo, ldc);
		}
		return;
	}
	if (K <= 0) {
		/* BLAS leaves C untouched for K = 0 only when beta = 1 */
		for (int i = 0; i < M; i++)
			for (int j = 0; j < N; j++)
				C[(long)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(long)i * ldc + j];
		return;
	}
	sgemm1(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* dl_sgemm_skinny's vectors: 8 floats (generic vectors, so every clone,
 * the baseline's pairs of SSE registers included, adds the same lanes in
 * the same order; the build does not contract to FMA) */
typedef float sk_v8 __attribute__((vector_size(32)));
typedef float sk_v8u __attribute__((vector_size(32), aligned(4), may_alias));
#define SK_LD(p) (*(const sk_v8u *)(p))

/* The sum of one dot product: *v's lanes pairwise, then the k from k0
 * (v by address: a vector argument's ABI depends on the clone's target) */
static inline __attribute__((always_inline)) float
skinny_sum(const sk_v8 *v, const float *a, const float *b, int k0, int K)
{
	float s = (((*v)[0] + (*v)[4]) + ((*v)[1] + (*v)[5])) +
		  (((*v)[2] + (*v)[6]) + ((*v)[3] + (*v)[7]));
	for (int t = k0; t < K; t++)
		s += a[t] * b[t];
	return s;
}

/* R rows of A times NB rows of Bt (R 1 or 4, NB 1 or 2, constants where
 * inlined): the R x NB dot products. Named accumulators, not an array,
 * keep them in registers. */
static inline __attribute__((always_inline)) void
skinny_tile(const float *A, int lda, const float *Bt, int ldb, float *C, int ldc,
	    int K, const int R, const int NB)
{
	const float *a0 = A, *a1 = A + (R > 1 ? lda : 0), *a2 = A + (R > 1 ? 2L * lda : 0);
	const float *a3 = A + (R > 1 ? 3L * lda : 0);
	const float *b0 = Bt, *b1 = Bt + (NB > 1 ? ldb : 0);
	sk_v8 c00 = {0}, c10 = {0}, c20 = {0}, c30 = {0};
	sk_v8 c01 = {0}, c11 = {0}, c21 = {0}, c31 = {0};
	int k = 0;
	for (; k + 8 <= K; k += 8) {
		sk_v8 u = SK_LD(b0 + k), w = SK_LD(b1 + k), x = SK_LD(a0 + k);
		c00 += x * u;
		if (NB > 1)
			c01 += x * w;
		if (R > 1) {
			x = SK_LD(a1 + k);
			c10 += x * u;
			if (NB > 1)
				c11 += x * w;
			x = SK_LD(a2 + k);
			c20 += x * u;
			if (NB > 1)
				c21 += x * w;
			x = SK_LD(a3 + k);
			c30 += x * u;
			if (NB > 1)
				c31 += x * w;
		}
	}
	C[0] = skinny_sum(&c00, a0, b0, k, K);
	if (NB > 1)
		C[1] = skinny_sum(&c01, a0, b1, k, K);
	if (R == 1)
		return;
	C[ldc] = skinny_sum(&c10, a1, b0, k, K);
	C[2L * ldc] = skinny_sum(&c20, a2, b0, k, K);
	C[3L * ldc] = skinny_sum(&c30, a3, b0, k, K);
	if (NB > 1) {
		C[ldc + 1] = skinny_sum(&c11, a1, b1, k, K);
		C[2L * ldc + 1] = skinny_sum(&c21, a2, b1, k, K);
		C[3L * ldc + 1] = skinny_sum(&c31, a3, b1, k, K);
	}
}

DL_CLONES void dl_sgemm_skinny(int M, int N, int K, const float *A, int lda,
			       const float *Bt, int ldb, float *C, int ldc)
{
	for (int m = 0; m < M; m += 4) {
		const float *a = A + (long)m * lda;
		float *c = C + (long)m * ldc;
		int n = 0;
		if (M - m >= 4) {
			for (; n + 2 <= N; n += 2)
				skinny_tile(a, lda, Bt + (long)n * ldb, ldb, c + n, ldc, K, 4, 2);
			if (n < N)
				skinny_tile(a, lda, Bt + (long)n * ldb, ldb, c + n, ldc, K, 4, 1);
			continue;
		}
		for (int r = 0; r < M - m; r++)
			for (n = 0; n < N; n++)
				skinny_tile(a + (long)r * lda, lda, Bt + (long)n * ldb, ldb,
					    c + (long)r * ldc + n, ldc, K, 1, 1);
	}
}

void dl_sgemm_ref(int ta, int tb, int M, int N, int K, float alpha,
		  const float *A, int lda, const float *B, int ldb, float beta,
		  float *C, int ldc)
{
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			double acc = 0;
			for (int k = 0; k < K; k++) {
				float a = ta ? A[(long)k * lda + i] : A[(long)i * lda + k];
				float b = tb ? B[(long)j * ldb + k] : B[(long)k * ldb + j];
				acc += (double)a * b;
			}
			float *c = &C[(long)i * ldc + j];
			*c = (float)(alpha * acc + (beta == 0.0f ? 0.0 : (double)beta * *c));
		}
}
