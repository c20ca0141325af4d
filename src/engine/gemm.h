/* The one matrix-product entry point: every GEMM-shaped computation goes
 * through dl_sgemm (CBLAS), so threading and any future kernel choice live
 * in one place. dl_sgemm_ref is the naive reference the tests compare with. */
#ifndef DL_GEMM_H
#define DL_GEMM_H

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
void dl_sgemm_ref(int ta, int tb, int M, int N, int K, float alpha,
		  const float *A, int lda, const float *B, int ldb, float beta,
		  float *C, int ldc);

#endif
