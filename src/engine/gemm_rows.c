/* dl_sgemm_rows: products whose every element is one chain of fused
 * multiply-adds over k in order, so its bits do not depend on which rows
 * and columns a call computes. See gemm.h. */
#include <math.h>
#include <string.h>

#include "config.h"
#include "engine/gemm.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define FX_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif

int64_t dl_sgemm_rows_floats(int N, int K)
{
	int64_t panels = ((int64_t)N + DL_ROWS_W - 1) / DL_ROWS_W;
	return panels * DL_ROWS_W * (K > 0 ? K : 0);
}

#ifdef FX_X86
/* p[k, 0..7] = b[0..7, k] for k in [0, 8), or += with add: an 8 x 8
 * transpose in registers, rows of b ldb apart, p's rows ldp apart. */
__attribute__((target("avx2"))) static inline void t8(float *p, int64_t ldp, const float *b,
						      int64_t ldb, int add)
{
	__m256 r0 = _mm256_loadu_ps(b), r1 = _mm256_loadu_ps(b + ldb);
	__m256 r2 = _mm256_loadu_ps(b + 2 * ldb), r3 = _mm256_loadu_ps(b + 3 * ldb);
	__m256 r4 = _mm256_loadu_ps(b + 4 * ldb), r5 = _mm256_loadu_ps(b + 5 * ldb);
	__m256 r6 = _mm256_loadu_ps(b + 6 * ldb), r7 = _mm256_loadu_ps(b + 7 * ldb);
	__m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
	__m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
	__m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
	__m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
	__m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
	__m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
	__m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
	__m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
	__m256 o[8] = {_mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
		       _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
		       _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
		       _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
	for (int i = 0; i < 8; i++)
		_mm256_storeu_ps(p + i * ldp, add ? _mm256_add_ps(_mm256_loadu_ps(p + i * ldp), o[i])
						  : o[i]);
}
#endif

static int rows_level(void);

/* Columns of src per block of the transpose: the block's 16 rows of dst
 * stay in L1 until their lines are whole, even where they are a power
 * of two apart (a 512 x 512 layer's weights: 64 rows 2 KiB apart fell
 * into two of L1's sets) */
#define T_COLS 16

void dl_transpose(float *restrict dst, int64_t ldd, const float *restrict src, int64_t lds,
		  int64_t rows, int64_t cols, int add)
{
	int vec = 0;
#ifdef FX_X86
	vec = rows_level() > 0;
#endif
	int64_t r8 = vec ? rows / 8 * 8 : 0, c8 = vec ? cols / 8 * 8 : 0;
	for (int64_t c0 = 0; c0 < cols; c0 += T_COLS) {
		int64_t c1 = c0 + T_COLS < cols ? c0 + T_COLS : cols;
		int64_t v1 = c1 < c8 ? c1 : c8;
#ifdef FX_X86
		for (int64_t r = 0; r < r8; r += 8)
			for (int64_t c = c0; c < v1; c += 8)
				t8(dst + c * ldd + r, ldd, src + r * lds + c, lds, add);
#endif
		for (int64_t r = 0; r < rows; r++)
			for (int64_t c = r < r8 && v1 > c0 ? v1 : c0; c < c1; c++)
				dst[c * ldd + r] = add ? dst[c * ldd + r] + src[r * lds + c]
						       : src[r * lds + c];
	}
}

/* Panels of DL_ROWS_W columns, k outermost in each; the columns past N
 * zero, so every kernel may read whole panels. From B [K, N] row pieces;
 * from Bt [N, K] a transpose, 8 x 8 blocks in registers where the CPU has
 * AVX2 (one float at a time it was a fifth of a Winograd layer's
 * products), the rest one float at a time. */
void dl_sgemm_rows_pack(float *P, int tb, const float *B, int ldb, int N, int K)
{
	int vec = 0;
#ifdef FX_X86
	vec = rows_level() > 0;
#endif
	for (int n0 = 0; n0 < N; n0 += DL_ROWS_W) {
		float *restrict p = P + (int64_t)n0 * K;
		int nw = N - n0 < DL_ROWS_W ? N - n0 : DL_ROWS_W;
		if (nw < DL_ROWS_W)
			memset(p, 0, (size_t)K * DL_ROWS_W * sizeof *p);
		if (!tb) {
			for (int k = 0; k < K; k++)
				memcpy(p + (int64_t)k * DL_ROWS_W, B + (int64_t)k * ldb + n0,
				       (size_t)nw * sizeof *p);
			continue;
		}
		int j = 0, k8 = vec ? K / 8 * 8 : 0;
#ifdef FX_X86
		for (; j + 8 <= nw && k8 > 0; j += 8)
			for (int k = 0; k < k8; k += 8)
				t8(p + (int64_t)k * DL_ROWS_W + j, DL_ROWS_W,
				   B + (int64_t)(n0 + j) * ldb + k, ldb, 0);
#endif
		for (int jj = 0; jj < nw; jj++) {
			const float *restrict b = B + (int64_t)(n0 + jj) * ldb;
			for (int k = jj < j ? k8 : 0; k < K; k++)
				p[(int64_t)k * DL_ROWS_W + jj] = b[k];
		}
	}
}

/* k per block: an A tile of 12 rows (12 KiB at 256) stays in L1 while
 * the blocks of a block of columns' panels (256 KiB, 16 KiB a panel)
 * stay in L2 and stream past it (KC 128 measured 2-5% slower on
 * GPT-2's products). A block after the first
 * goes on from the partial sums in C, which hold the chains' float
 * values exactly: the same bits as one block.
 *
 * Up to KC_ONE k run as one block, NC_ONE columns wide (the block's
 * panels 384 KiB at k 768): no partial sums go back to C, and the A
 * tile, past L1, comes from L2. With weights from memory (each product
 * after a 64 MiB sweep: a decoder's layers in turn), GPT-2's products
 * at 128 rows took 285.0-286.9 ms in all against 287.7-293.3 in blocks
 * of 256, five alternating runs; k 384, 512 and 1024 in blocks, or 64,
 * 96 and 192 columns, were between the two. Longer k (a [T, 3072]
 * input) keeps the blocks of 256: as one block of 768, its products at
 * 512 and 4096 rows took 2-3% longer (tools/bench/gemm_rows.c). */
#define KC 256
#define KC_ONE 1024
/* columns per block */
#define NC 256
#define NC_ONE 128

/* Any CPU: the same chains, fmaf's single rounding as the vector FMAs. */
static void rows_plain(int M, int N, int K, const float *A, int lda, const float *P,
		       float *C, int ldc, int add)
{
	for (int n0 = 0; n0 < N; n0 += DL_ROWS_W) {
		const float *p = P + (int64_t)n0 * K;
		int nw = N - n0 < DL_ROWS_W ? N - n0 : DL_ROWS_W;
		for (int m = 0; m < M; m++) {
			const float *a = A + (int64_t)m * lda;
			float *c = C + (int64_t)m * ldc + n0;
			if (add) {
				/* blocks of KC, each added (see rows_run) */
				for (int k0 = 0; k0 < K; k0 += KC) {
					float acc[DL_ROWS_W] = {0};
					for (int k = k0; k < K && k < k0 + KC; k++)
						for (int j = 0; j < nw; j++)
							acc[j] = fmaf(a[k], p[(int64_t)k * DL_ROWS_W + j],
								      acc[j]);
					for (int j = 0; j < nw; j++)
						c[j] += acc[j];
				}
				continue;
			}
			float acc[DL_ROWS_W] = {0};
			for (int k = 0; k < K; k++)
				for (int j = 0; j < nw; j++)
					acc[j] = fmaf(a[k], p[(int64_t)k * DL_ROWS_W + j], acc[j]);
			memcpy(c, acc, (size_t)nw * sizeof *acc);
		}
	}
}

#ifdef FX_X86
/* How a kernel's chains over k meet C: from zero, stored (a product's
 * first k block); from C's value (a later one); or from zero, their sums
 * added to C at the end (dl_sgemm_rows_add, every block). */
enum chain { CHAIN_FRESH, CHAIN_ON, CHAIN_ADD };

/* Kernels: R rows of A (broadcast) times one panel's block of K (a
 * vector or two of columns), R accumulators per vector in registers,
 * their chains met with C as ch says; R a constant where inlined, the
 * loops over it unrolled. The first nw columns loaded and stored. */
#define T512 __attribute__((target("avx512f,avx512vl,fma")))
#define T256 __attribute__((target("avx2,fma")))
#define INL static inline __attribute__((always_inline))

#define ZKER(NAME, VT, ZERO, MASKT, LOADZ, LOAD, FMA, BCAST, STORE, ADD)                           \
	T512 INL void NAME(const float *A, int64_t lda, const float *p, int K, float *C,           \
			   int64_t ldc, const int R, int nw, enum chain ch)                        \
	{                                                                                          \
		VT c[16];                                                                          \
		MASKT mk = (MASKT)(nw >= 16 ? 0xffffu : (1u << nw) - 1);                           \
		_Pragma("GCC unroll 16")                                                           \
		for (int r = 0; r < R; r++)                                                        \
			c[r] = ch == CHAIN_ON ? LOADZ(mk, C + r * ldc) : ZERO();                   \
		for (int k = 0; k < K; k++) {                                                      \
			VT b = LOAD(p + (int64_t)k * DL_ROWS_W);                                   \
			_Pragma("GCC unroll 16")                                                   \
			for (int r = 0; r < R; r++)                                                \
				c[r] = FMA(BCAST(A[r * lda + k]), b, c[r]);                        \
		}                                                                                  \
		_Pragma("GCC unroll 16")                                                           \
		for (int r = 0; r < R; r++)                                                        \
			STORE(C + r * ldc, mk, ch == CHAIN_ADD ? ADD(c[r], LOADZ(mk, C + r * ldc)) \
							 : c[r]);                                  \
	}

ZKER(z16, __m512, _mm512_setzero_ps, __mmask16, _mm512_maskz_loadu_ps, _mm512_loadu_ps,
     _mm512_fmadd_ps, _mm512_set1_ps, _mm512_mask_storeu_ps, _mm512_add_ps)
ZKER(z8, __m256, _mm256_setzero_ps, __mmask8, _mm256_maskz_loadu_ps, _mm256_loadu_ps,
     _mm256_fmadd_ps, _mm256_set1_ps, _mm256_mask_storeu_ps, _mm256_add_ps)
ZKER(z4, __m128, _mm_setzero_ps, __mmask8, _mm_maskz_loadu_ps, _mm_loadu_ps,
     _mm_fmadd_ps, _mm_set1_ps, _mm_mask_storeu_ps, _mm_add_ps)

/* Fewer than 4 rows: R rows (1 to 3) times four whole panels at once,
 * so 4 R chains are in flight, not R (one chain waits out the FMA's
 * latency at every k). Panels pstride floats apart. */
T512 INL void zq(const float *A, int64_t lda, const float *p, int64_t pstride, int K,
		 float *C, int64_t ldc, const int R, enum chain ch)
{
	__m512 c[3][4];
#pragma GCC unroll 3
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int j = 0; j < 4; j++)
			c[r][j] = ch == CHAIN_ON ? _mm512_loadu_ps(C + r * ldc + 16 * j)
						 : _mm512_setzero_ps();
	for (int k = 0; k < K; k++) {
		__m512 b[4];
#pragma GCC unroll 4
		for (int j = 0; j < 4; j++)
			b[j] = _mm512_loadu_ps(p + j * pstride + (int64_t)k * DL_ROWS_W);
#pragma GCC unroll 3
		for (int r = 0; r < R; r++) {
			__m512 a = _mm512_set1_ps(A[r * lda + k]);
#pragma GCC unroll 4
			for (int j = 0; j < 4; j++)
				c[r][j] = _mm512_fmadd_ps(a, b[j], c[r][j]);
		}
	}
#pragma GCC unroll 3
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int j = 0; j < 4; j++)
			_mm512_storeu_ps(C + r * ldc + 16 * j,
					 ch == CHAIN_ADD
						 ? _mm512_add_ps(c[r][j], _mm512_loadu_ps(C + r * ldc + 16 * j))
						 : c[r][j]);
}

/* R rows (4 to 12) times two whole panels: per k two loads of B and R
 * broadcasts for 2 R FMAs (one panel took a broadcast per FMA). With
 * pf, the lines of the block that comes next (pf and pf + pstride, as
 * p) are prefetched into L2 along the way: the first row tile of a
 * block calls it so, and the next block arrives while this one is
 * multiplied (an LM head's panels come from memory: 94 -> 88 ms). */
T512 INL void zw(const float *A, int64_t lda, const float *p, int64_t pstride, int K,
		 float *C, int64_t ldc, const int R, enum chain ch, const float *pf)
{
	__m512 c0[12], c1[12];
#pragma GCC unroll 12
	for (int r = 0; r < R; r++) {
		c0[r] = ch == CHAIN_ON ? _mm512_loadu_ps(C + r * ldc) : _mm512_setzero_ps();
		c1[r] = ch == CHAIN_ON ? _mm512_loadu_ps(C + r * ldc + DL_ROWS_W)
				       : _mm512_setzero_ps();
	}
	for (int k = 0; k < K; k++) {
		__m512 b0 = _mm512_loadu_ps(p + (int64_t)k * DL_ROWS_W);
		__m512 b1 = _mm512_loadu_ps(p + pstride + (int64_t)k * DL_ROWS_W);
		if (pf) {
			_mm_prefetch((const char *)(pf + (int64_t)k * DL_ROWS_W), _MM_HINT_T1);
			_mm_prefetch((const char *)(pf + pstride + (int64_t)k * DL_ROWS_W),
				     _MM_HINT_T1);
		}
#pragma GCC unroll 12
		for (int r = 0; r < R; r++) {
			__m512 a = _mm512_set1_ps(A[r * lda + k]);
			c0[r] = _mm512_fmadd_ps(a, b0, c0[r]);
			c1[r] = _mm512_fmadd_ps(a, b1, c1[r]);
		}
	}
#pragma GCC unroll 12
	for (int r = 0; r < R; r++) {
		if (ch == CHAIN_ADD) {
			c0[r] = _mm512_add_ps(c0[r], _mm512_loadu_ps(C + r * ldc));
			c1[r] = _mm512_add_ps(c1[r], _mm512_loadu_ps(C + r * ldc + DL_ROWS_W));
		}
		_mm512_storeu_ps(C + r * ldc, c0[r]);
		_mm512_storeu_ps(C + r * ldc + DL_ROWS_W, c1[r]);
	}
}

/* One A tile of R rows against every panel of a block of kc rows of k
 * from k0: whole panels two at a time (R 4 to 12) or four at a time (R
 * 1 to 3: one chain a panel would wait out the FMA's latency at every
 * k), then the narrowest vector that holds the last panel's columns (a
 * 49-column product's last column costs a quarter of a full panel). pf:
 * the next block's start, or NULL (see zw). */
T512 INL void z_panels(const float *A, int64_t lda, const float *P, int64_t K, int k0,
		       int kc, float *C, int64_t ldc, int N, const int R, const float *pf,
		       int add)
{
	int n0 = 0;
	enum chain ch = add ? CHAIN_ADD : k0 > 0 ? CHAIN_ON : CHAIN_FRESH;
	if (R < 4)
		for (; n0 + 4 * DL_ROWS_W <= N; n0 += 4 * DL_ROWS_W)
			zq(A, lda, P + n0 * K + (int64_t)k0 * DL_ROWS_W, DL_ROWS_W * K, kc,
			   C + n0, ldc, R, ch);
	else
		for (; n0 + 2 * DL_ROWS_W <= N; n0 += 2 * DL_ROWS_W)
			zw(A, lda, P + n0 * K + (int64_t)k0 * DL_ROWS_W, DL_ROWS_W * K, kc,
			   C + n0, ldc, R, ch, pf ? pf + n0 * K : NULL);
	for (; n0 < N; n0 += DL_ROWS_W) {
		const float *p = P + n0 * K + (int64_t)k0 * DL_ROWS_W;
		int nw = N - n0 < DL_ROWS_W ? N - n0 : DL_ROWS_W;
		if (nw > 8)
			z16(A, lda, p, kc, C + n0, ldc, R, nw, ch);
		else if (nw > 4)
			z8(A, lda, p, kc, C + n0, ldc, R, nw, ch);
		else
			z4(A, lda, p, kc, C + n0, ldc, R, nw, ch);
	}
}

/* A's 12 rows of kc floats from a (rows lda apart) into tile, rows ts
 * apart (see rows_avx512: rows a multiple of 2 KiB apart evict
 * themselves from L1) */
static inline void copy_tile(float *tile, int ts, const float *a, int64_t lda, int kc)
{
	for (int r = 0; r < 12; r++)
		memcpy(tile + r * ts, a + r * lda, (size_t)kc * sizeof *tile);
}

/* The last rows (fewer than 12) of a block: tiles of 8, 4 and the last 1
 * to 3, the first of them prefetching pf (see zw). */
T512 static void z_tail(const float *a, int64_t lda, const float *p, int64_t K, int k0,
			int kc, float *c, int64_t ldc, int nc, int rows, const float *pf, int add)
{
	if (rows >= 8) {
		z_panels(a, lda, p, K, k0, kc, c, ldc, nc, 8, pf, add);
		rows -= 8, a += 8 * lda, c += 8 * ldc, pf = NULL;
	}
	if (rows >= 4) {
		z_panels(a, lda, p, K, k0, kc, c, ldc, nc, 4, pf, add);
		rows -= 4, a += 4 * lda, c += 4 * ldc;
	}
	if (rows == 3)
		z_panels(a, lda, p, K, k0, kc, c, ldc, nc, 3, NULL, add);
	else if (rows == 2)
		z_panels(a, lda, p, K, k0, kc, c, ldc, nc, 2, NULL, add);
	else if (rows == 1)
		z_panels(a, lda, p, K, k0, kc, c, ldc, nc, 1, NULL, add);
}

/* Rows a multiple of 2 KiB apart (see rows_avx512: tiles copied) with C
 * small enough to stay in L2: k blocks outermost, each tile copied once
 * per k block and multiplied against every block of columns. In
 * rows_avx512's order a tile was copied again for each block of columns:
 * a decoder's [128, 3072] inputs to its [768, 3072] layers (three blocks
 * of columns) spent 1.1-1.4% of its forward in memmove. */
#define COPIED_C_MAX (512 << 10)

T512 static void rows_avx512_copied(int M, int N, int K, const float *A, int lda,
				    const float *P, float *C, int ldc, int add)
{
	float tile[12 * (KC + 16)] __attribute__((aligned(64)));
	for (int k0 = 0; k0 < K; k0 += KC) {
		int kc = K - k0 < KC ? K - k0 : KC, m = 0;
		for (; m + 12 <= M; m += 12) {
			copy_tile(tile, KC + 16, A + (int64_t)m * lda + k0, lda, kc);
			for (int n0 = 0; n0 < N; n0 += NC)
				z_panels(tile, KC + 16, P + (int64_t)n0 * K, K, k0, kc,
					 C + (int64_t)m * ldc + n0, ldc, N - n0 < NC ? N - n0 : NC,
					 12, NULL, add);
		}
		for (int n0 = 0; m < M && n0 < N; n0 += NC)
			z_tail(A + (int64_t)m * lda + k0, lda, P + (int64_t)n0 * K, K, k0, kc,
			       C + (int64_t)m * ldc + n0, ldc, N - n0 < NC ? N - n0 : NC, M - m,
			       NULL, add);
	}
}

/* Column blocks outermost, then k: a block's partial sums (the rows by
 * NC columns) stay in L2 from one k block to the next (an LM head's
 * [128, 50257] output went through memory once per k block before).
 * Rows in tiles of 12, then 8, 4 and the last 1 to 3. A tile whose rows
 * are a multiple of 2 KiB apart (a [T, 3072] input) would fall into two
 * of L1's 64 sets and evict itself: it is copied to a buffer first (2x
 * the time without). */
T512 static void rows_avx512(int M, int N, int K, const float *A, int lda, const float *P,
			     float *C, int ldc, int add)
{
	if (lda % 512 == 0 && M >= 12 && N >= 8 * DL_ROWS_W &&
	    (int64_t)M * N * (int64_t)sizeof *C <= COPIED_C_MAX) {
		rows_avx512_copied(M, N, K, A, lda, P, C, ldc, add);
		return;
	}
	float tile[12 * (KC_ONE + 32)] __attribute__((aligned(64)));
	/* adding: blocks of KC whatever K (see rows_run) */
	int kb = K <= (add ? KC : KC_ONE) ? K : KC, nb = kb > KC ? NC_ONE : NC;
	/* the tile's rows: not a multiple of 2 KiB apart either */
	int ts = kb + 16 + ((kb + 16) % 512 == 0 ? 16 : 0);
	for (int n0 = 0; n0 < N; n0 += nb) {
		const float *p = P + (int64_t)n0 * K;
		int nc = N - n0 < nb ? N - n0 : nb;
		int copy = lda % 512 == 0 && nc >= 8 * DL_ROWS_W;
		for (int k0 = 0; k0 < K; k0 += kb) {
			int kc = K - k0 < kb ? K - k0 : kb, m = 0;
			/* the next block: this one's panels further down k, or
			 * the next columns' from k = 0 */
			const float *next = k0 + kb < K ? p + (int64_t)(k0 + kb) * DL_ROWS_W
					    : n0 + nb < N ? P + (int64_t)(n0 + nb) * K
					    : NULL;
			for (; m + 12 <= M; m += 12) {
				const float *a = A + (int64_t)m * lda + k0;
				float *c = C + (int64_t)m * ldc + n0;
				const float *pf = m == 0 ? next : NULL;
				if (copy) {
					copy_tile(tile, ts, a, lda, kc);
					z_panels(tile, ts, p, K, k0, kc, c, ldc, nc, 12, pf, add);
				} else {
					z_panels(a, lda, p, K, k0, kc, c, ldc, nc, 12, pf, add);
				}
			}
			z_tail(A + (int64_t)m * lda + k0, lda, p, K, k0, kc, C + (int64_t)m * ldc + n0,
			       ldc, nc, M - m, m == 0 ? next : NULL, add);
		}
	}
}

/* More than ROWS_TALL rows run as row blocks of at most ROWS_BLOCK, as
 * equal as may be, one after the other: in one, a block of columns'
 * partial sums for all the rows (4096 x NC floats, 4 MiB) went out of L2
 * and back at every k block, and the products on packed weights took
 * 1.10-1.12x OpenBLAS's time at 4096 rows (a decoder's batch of 32);
 * in blocks of 256 rows, 0.99-1.00x (tools/bench/gemm_rows.c), each
 * block reading the panels again, from L3. The same chains, so the same
 * bits. */
#define ROWS_TALL 512
#define ROWS_BLOCK 256

T512 static void rows_avx512_tall(int M, int N, int K, const float *A, int lda,
				  const float *P, float *C, int ldc, int add)
{
	if (M <= ROWS_TALL) {
		rows_avx512(M, N, K, A, lda, P, C, ldc, add);
		return;
	}
	int blocks = (M + ROWS_BLOCK - 1) / ROWS_BLOCK, rows = (M + blocks - 1) / blocks;
	for (int m0 = 0; m0 < M; m0 += rows)
		rows_avx512(M - m0 < rows ? M - m0 : rows, N, K, A + (int64_t)m0 * lda, lda, P,
			    C + (int64_t)m0 * ldc, ldc, add);
}

/* AVX2: 16 registers, so 6 rows times the panel's two halves. */
T256 INL void y16(const float *A, int64_t lda, const float *p, int K, float *C,
		  int64_t ldc, const int R, int nw, enum chain ch)
{
	__m256 c0[6], c1[6];
#pragma GCC unroll 6
	for (int r = 0; r < R; r++) {
		float t[16] = {0};
		if (ch == CHAIN_ON)
			memcpy(t, C + r * ldc, (size_t)nw * sizeof *t);
		c0[r] = _mm256_loadu_ps(t);
		c1[r] = _mm256_loadu_ps(t + 8);
	}
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
		for (int j = 0; ch == CHAIN_ADD && j < nw; j++)
			t[j] += C[r * ldc + j];
		memcpy(C + r * ldc, t, (size_t)nw * sizeof *t);
	}
}

T256 static void rows_avx2(int M, int N, int K, const float *A, int lda, const float *P,
			   float *C, int ldc, int add)
{
	for (int k0 = 0; k0 < K; k0 += KC) {
		int kc = K - k0 < KC ? K - k0 : KC;
		enum chain ch = add ? CHAIN_ADD : k0 > 0 ? CHAIN_ON : CHAIN_FRESH;
		for (int m = 0; m < M;) {
			int R = M - m >= 6 ? 6 : 1;
			for (int n0 = 0; n0 < N; n0 += DL_ROWS_W) {
				const float *p = P + (int64_t)n0 * K + (int64_t)k0 * DL_ROWS_W;
				const float *a = A + (int64_t)m * lda + k0;
				float *c = C + (int64_t)m * ldc + n0;
				int nw = N - n0 < DL_ROWS_W ? N - n0 : DL_ROWS_W;
				if (R == 6)
					y16(a, lda, p, kc, c, ldc, 6, nw, ch);
				else
					y16(a, lda, p, kc, c, ldc, 1, nw, ch);
			}
			m += R;
		}
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

int dl_sgemm_rows_level(void)
{
	return rows_level();
}

int dl_sgemm_rows_kernels(int want)
{
	int l = cpu_level();
	if (want >= 0 && want < l)
		l = want;
	__atomic_store_n(&level, l, __ATOMIC_RELAXED);
	return l;
}

/* 1 when this CPU's FMA units are 512 bits wide: an AVX-512 CPU that is
 * not AMD's family 19h (Zen 4, which splits 512-bit operations in two) */
static int cpu_wide(void)
{
#ifdef FX_X86
	unsigned a, b, c, d;
	if (cpu_level() < 2 || !__get_cpuid(0, &a, &b, &c, &d))
		return 0;
	int amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;   /* AuthenticAMD */
	if (!__get_cpuid(1, &a, &b, &c, &d))
		return 0;
	unsigned family = (a >> 8) & 0xf;
	if (family == 0xf)
		family += (a >> 20) & 0xff;
	return !(amd && family == 0x19);
#else
	return 0;
#endif
}

static int wide = -1;   /* cpu_wide's, or the tests' */

int dl_sgemm_rows_wide(void)
{
	int w = __atomic_load_n(&wide, __ATOMIC_RELAXED);
	if (w < 0) {
		w = cpu_wide();
		__atomic_store_n(&wide, w, __ATOMIC_RELAXED);
	}
	return w && rows_level() == 2;
}

int dl_sgemm_rows_wide_set(int want)
{
	__atomic_store_n(&wide, want < 0 ? cpu_wide() : want > 0, __ATOMIC_RELAXED);
	return dl_sgemm_rows_wide();
}

/* C = A P; or with add C += A P, k in blocks of KC, each block's chains
 * from zero and added to C in turn, whatever the kernels (the AVX2
 * kernels' blocks; the AVX-512 kernels' would be KC_ONE) */
static void rows_run(int M, int N, int K, const float *A, int lda, const float *P, float *C,
		     int ldc, int add)
{
	if (M <= 0 || N <= 0)
		return;
	switch (rows_level()) {
#ifdef FX_X86
	case 2:
		rows_avx512_tall(M, N, K, A, lda, P, C, ldc, add);
		return;
	case 1:
		rows_avx2(M, N, K, A, lda, P, C, ldc, add);
		return;
#endif
	default:
		break;
	}
	rows_plain(M, N, K, A, lda, P, C, ldc, add);
}

void dl_sgemm_rows(int M, int N, int K, const float *A, int lda, const float *P, float *C,
		   int ldc)
{
	rows_run(M, N, K, A, lda, P, C, ldc, 0);
}

void dl_sgemm_rows_add(int M, int N, int K, const float *A, int lda, const float *P,
		       float *C, int ldc)
{
	rows_run(M, N, K, A, lda, P, C, ldc, 1);
}
