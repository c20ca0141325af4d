/* dl_sgemm_rows: products whose every element is one chain of fused
 * multiply-adds over k in order, so its bits do not depend on which rows
 * and columns a call computes. See gemm.h. */
#include <math.h>
#include <string.h>

#include "config.h"
#include "engine/gemm.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define FX_X86 1
#include <immintrin.h>
#endif

int64_t dl_sgemm_rows_floats(int N, int K)
{
	int64_t panels = ((int64_t)N + DL_ROWS_W - 1) / DL_ROWS_W;
	return panels * DL_ROWS_W * (K > 0 ? K : 0);
}

/* A transpose, column by column of Bt; the panel's columns past N are
 * zero, so every kernel may read whole panels. */
void dl_sgemm_rows_pack(float *P, const float *Bt, int ldb, int N, int K)
{
	for (int n0 = 0; n0 < N; n0 += DL_ROWS_W) {
		float *restrict p = P + (int64_t)n0 * K;
		int nw = N - n0 < DL_ROWS_W ? N - n0 : DL_ROWS_W;
		if (nw < DL_ROWS_W)
			memset(p, 0, (size_t)K * DL_ROWS_W * sizeof *p);
		for (int j = 0; j < nw; j++) {
			const float *restrict b = Bt + (int64_t)(n0 + j) * ldb;
			for (int k = 0; k < K; k++)
				p[(int64_t)k * DL_ROWS_W + j] = b[k];
		}
	}
}

/* Any CPU: the same chains, fmaf's single rounding as the vector FMAs. */
static void rows_plain(int M, int N, int K, const float *A, int lda, const float *P,
		       float *C, int ldc)
{
	for (int n0 = 0; n0 < N; n0 += DL_ROWS_W) {
		const float *p = P + (int64_t)n0 * K;
		int nw = N - n0 < DL_ROWS_W ? N - n0 : DL_ROWS_W;
		for (int m = 0; m < M; m++) {
			const float *a = A + (int64_t)m * lda;
			float acc[DL_ROWS_W] = {0};
			for (int k = 0; k < K; k++)
				for (int j = 0; j < nw; j++)
					acc[j] = fmaf(a[k], p[(int64_t)k * DL_ROWS_W + j], acc[j]);
			memcpy(C + (int64_t)m * ldc + n0, acc, (size_t)nw * sizeof *acc);
		}
	}
}

#ifdef FX_X86
/* Kernels: R rows of A (broadcast) times one panel (a vector or two of
 * columns), R accumulators per vector in registers; R a constant where
 * inlined, the loops over it unrolled. The first nw columns stored. */
#define T512 __attribute__((target("avx512f,avx512vl,fma")))
#define T256 __attribute__((target("avx2,fma")))
#define INL static inline __attribute__((always_inline))

T512 INL void z16(const float *A, int64_t lda, const float *p, int K, float *C,
		  int64_t ldc, const int R, int nw)
{
	__m512 c[16];
#pragma GCC unroll 16
	for (int r = 0; r < R; r++)
		c[r] = _mm512_setzero_ps();
	for (int k = 0; k < K; k++) {
		__m512 b = _mm512_loadu_ps(p + (int64_t)k * DL_ROWS_W);
#pragma GCC unroll 16
		for (int r = 0; r < R; r++)
			c[r] = _mm512_fmadd_ps(_mm512_set1_ps(A[r * lda + k]), b, c[r]);
	}
	__mmask16 mk = (__mmask16)(nw >= 16 ? 0xffffu : (1u << nw) - 1);
#pragma GCC unroll 16
	for (int r = 0; r < R; r++)
		_mm512_mask_storeu_ps(C + r * ldc, mk, c[r]);
}

T512 INL void z8(const float *A, int64_t lda, const float *p, int K, float *C,
		 int64_t ldc, const int R, int nw)
{
	__m256 c[16];
#pragma GCC unroll 16
	for (int r = 0; r < R; r++)
		c[r] = _mm256_setzero_ps();
	for (int k = 0; k < K; k++) {
		__m256 b = _mm256_loadu_ps(p + (int64_t)k * DL_ROWS_W);
#pragma GCC unroll 16
		for (int r = 0; r < R; r++)
			c[r] = _mm256_fmadd_ps(_mm256_set1_ps(A[r * lda + k]), b, c[r]);
	}
	__mmask8 mk = (__mmask8)((1u << nw) - 1);
#pragma GCC unroll 16
	for (int r = 0; r < R; r++)
		_mm256_mask_storeu_ps(C + r * ldc, mk, c[r]);
}

T512 INL void z4(const float *A, int64_t lda, const float *p, int K, float *C,
		 int64_t ldc, const int R, int nw)
{
	__m128 c[16];
#pragma GCC unroll 16
	for (int r = 0; r < R; r++)
		c[r] = _mm_setzero_ps();
	for (int k = 0; k < K; k++) {
		__m128 b = _mm_loadu_ps(p + (int64_t)k * DL_ROWS_W);
#pragma GCC unroll 16
		for (int r = 0; r < R; r++)
			c[r] = _mm_fmadd_ps(_mm_set1_ps(A[r * lda + k]), b, c[r]);
	}
	__mmask8 mk = (__mmask8)((1u << nw) - 1);
#pragma GCC unroll 16
	for (int r = 0; r < R; r++)
		_mm_mask_storeu_ps(C + r * ldc, mk, c[r]);
}

/* One panel's rows: 16 at a time, then 4, then 1; the narrowest vector
 * that holds the panel's columns (a 49-column product's last column costs
 * a quarter of a full panel, not all of it). */
#define ROWS_OF(KER, A, lda, p, K, C, ldc, M, nw)                                      \
	do {                                                                            \
		int m_ = 0;                                                             \
		for (; m_ + 16 <= (M); m_ += 16)                                        \
			KER((A) + (int64_t)m_ * (lda), lda, p, K, (C) + (int64_t)m_ * (ldc), ldc, 16, nw); \
		for (; m_ + 4 <= (M); m_ += 4)                                          \
			KER((A) + (int64_t)m_ * (lda), lda, p, K, (C) + (int64_t)m_ * (ldc), ldc, 4, nw); \
		for (; m_ < (M); m_++)                                                  \
			KER((A) + (int64_t)m_ * (lda), lda, p, K, (C) + (int64_t)m_ * (ldc), ldc, 1, nw); \
	} while (0)

T512 static void rows_avx512(int M, int N, int K, const float *A, int lda, const float *P,
			     float *C, int ldc)
{
	for (int n0 = 0; n0 < N; n0 += DL_ROWS_W) {
		const float *p = P + (int64_t)n0 * K;
		int nw = N - n0 < DL_ROWS_W ? N - n0 : DL_ROWS_W;
		if (nw > 8)
			ROWS_OF(z16, A, lda, p, K, C + n0, ldc, M, nw);
		else if (nw > 4)
			ROWS_OF(z8, A, lda, p, K, C + n0, ldc, M, nw);
		else
			ROWS_OF(z4, A, lda, p, K, C + n0, ldc, M, nw);
	}
}

/* AVX2: 16 registers, so 6 rows times the panel's two halves. */
T256 INL void y16(const float *A, int64_t lda, const float *p, int K, float *C,
		  int64_t ldc, const int R, int nw)
{
	__m256 c0[6], c1[6];
#pragma GCC unroll 6
	for (int r = 0; r < R; r++)
		c0[r] = c1[r] = _mm256_setzero_ps();
	for (int k = 0; k < K; k++) {
		__m256 b0 = _mm256_loadu_ps(p + (int64_t)k * DL_ROWS_W);
		__m256 b1 = _mm256_loadu_ps(p + (int64_t)k * DL_ROWS_W + 8);
#pragma GCC unroll 6
		for (int r = 0; r < R; r++) {
			__m256 a = _mm256_set1_ps(A[r * lda + k]);
			c0[r] = _mm256_fmadd_ps(a, b0, c0[r]);
			c1[r] = _mm256_fmadd_ps(a, b1, c1[r]);
		}
	}
#pragma GCC unroll 6
	for (int r = 0; r < R; r++) {
		float t[16];
		_mm256_storeu_ps(t, c0[r]);
		_mm256_storeu_ps(t + 8, c1[r]);
		memcpy(C + r * ldc, t, (size_t)nw * sizeof *t);
	}
}

T256 static void rows_avx2(int M, int N, int K, const float *A, int lda, const float *P,
			   float *C, int ldc)
{
	for (int n0 = 0; n0 < N; n0 += DL_ROWS_W) {
		const float *p = P + (int64_t)n0 * K;
		int nw = N - n0 < DL_ROWS_W ? N - n0 : DL_ROWS_W;
		int m = 0;
		for (; m + 6 <= M; m += 6)
			y16(A + (int64_t)m * lda, lda, p, K, C + (int64_t)m * ldc + n0, ldc, 6, nw);
		for (; m < M; m++)
			y16(A + (int64_t)m * lda, lda, p, K, C + (int64_t)m * ldc + n0, ldc, 1, nw);
	}
}

#endif

/* 2: AVX-512, 1: AVX2 and FMA, 0: neither */
static int cpu_level(void)
{
#ifdef FX_X86
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") ? 2 :
	       __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1 : 0;
#else
	return 0;
#endif
}

static int level = -1;   /* the kernels used: cpu_level's, or the tests' */

static int rows_level(void)
{
	int l = __atomic_load_n(&level, __ATOMIC_RELAXED);
	if (l < 0) {
		l = cpu_level();
		__atomic_store_n(&level, l, __ATOMIC_RELAXED);
	}
	return l;
}

int dl_sgemm_rows_kernels(int want)
{
	int l = cpu_level();
	if (want >= 0 && want < l)
		l = want;
	__atomic_store_n(&level, l, __ATOMIC_RELAXED);
	return l;
}

void dl_sgemm_rows(int M, int N, int K, const float *A, int lda, const float *P, float *C,
		   int ldc)
{
	if (M <= 0 || N <= 0)
		return;
	switch (rows_level()) {
#ifdef FX_X86
	case 2:
		rows_avx512(M, N, K, A, lda, P, C, ldc);
		return;
	case 1:
		rows_avx2(M, N, K, A, lda, P, C, ldc);
		return;
#endif
	default:
		break;
	}
	rows_plain(M, N, K, A, lda, P, C, ldc);
}
