/* The GEMM wrapper over CBLAS, the naive reference, and thread control. */
#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "config.h"
#include "engine/gemm.h"
#include "engine/op.h"

static int op_threads = 1;

void dl_sgemm(int ta, int tb, int M, int N, int K, float alpha,
	      const float *A, int lda, const float *B, int ldb, float beta,
	      float *C, int ldc)
{
	if (M <= 0 || N <= 0)
		return;
	if (K <= 0) {
		/* BLAS leaves C untouched for K = 0 only when beta = 1 */
		for (int i = 0; i < M; i++)
			for (int j = 0; j < N; j++)
				C[(long)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(long)i * ldc + j];
		return;
	}
	cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
		    tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B,
		    ldb, beta, C, ldc);
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

void dl_set_threads(int n)
{
	if (n <= 0) {
#ifdef _OPENMP
		n = omp_get_num_procs();
#else
		n = 1;
#endif
	}
	op_threads = n;
#ifdef _OPENMP
	omp_set_num_threads(n);
#endif
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
	openblas_set_num_threads(n);
#endif
}

int dl_threads(void)
{
	return op_threads;
}
