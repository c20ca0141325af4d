/* dl_sgemm_rows against OpenBLAS's sgemm on the Winograd layers' products:
 * nx products C[xi] [M, N] = A[xi] [M, K] x Bt[xi] [N, K]^T (A the
 * transformed weights U[xi], Bt the transformed input V[xi], N the tiles
 * of a block), the shapes of resnet18 (224x224 at batch 1, and its
 * blocks of 56 and 64 tiles at batch 32) and densenet121's 3x3 layers;
 * then im2col's products at batch 1, weights [M, K] times columns [K, N].
 * dlrun's side packs Bt for every product, as conv.c does. A second
 * table times the linear layers' products on weights packed once
 * (linear_table). The best of 30 runs of each, one thread, and the
 * largest difference between them:
 *
 *   cc -O2 -std=c11 -Isrc -I. tools/bench/gemm_rows.c src/engine/gemm_rows.c \
 *      -lopenblas -lm -o /tmp/gemm_rows
 *   (with the -I and -L paths of OpenBLAS that ./configure found)
 *   OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=Haswell /tmp/gemm_rows [--avx2]
 *
 * --avx2 runs dlrun's side on its AVX2 kernels, as on a CPU without
 * AVX-512.
 *
 * tools/bench/RESULTS.md has the numbers. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/gemm.h"

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static float *filled(int64_t n, unsigned seed)
{
	float *p = malloc((size_t)n * sizeof *p);
	if (!p) {
		fprintf(stderr, "gemm_rows: out of memory\n");
		exit(1);
	}
	srand(seed);
	for (int64_t i = 0; i < n; i++)
		p[i] = (float)rand() / (float)RAND_MAX - 0.5f;
	return p;
}

/* The second table: y [M, Out] = x [M, In] W^T at inference, W [Out, In] a
 * weight packed once (src/engine/xwt.c packs it in place; here into a
 * copy, the same panels), so dlrun's side is the kernel alone, while
 * OpenBLAS packs W at every call as dl_sgemm does: a GPT-2-shaped
 * decoder's products at batch 1 (128 rows), at 512 and 4096 rows (a
 * batch of 32: dl_sgemm_rows takes such rows in blocks) and at 5 rows,
 * and a classifier head at
 * batch 1. The best of 30 runs (5 for the LM head). */
static void linear_table(void)
{
	static const struct { int M, In, Out; const char *what; } sh[] = {
		{128, 768, 2304, "GPT-2 attention in_proj, T 128"},
		{128, 768, 768, "GPT-2 attention out_proj, T 128"},
		{128, 768, 3072, "GPT-2 linear1, T 128"},
		{128, 3072, 768, "GPT-2 linear2, T 128"},
		{128, 768, 50257, "GPT-2 LM head, T 128"},
		{512, 768, 2304, "GPT-2 attention in_proj, 512 rows"},
		{512, 3072, 768, "GPT-2 linear2, 512 rows"},
		{4096, 768, 2304, "GPT-2 attention in_proj, 4096 rows (batch 32)"},
		{4096, 3072, 768, "GPT-2 linear2, 4096 rows (batch 32)"},
		{5, 768, 2304, "GPT-2 attention in_proj, 5 rows"},
		{5, 3072, 768, "GPT-2 linear2, 5 rows"},
		{1, 1280, 1000, "mobilenet_v2 / efficientnet_b0 classifier, batch 1"},
	};
	printf("\n| M | In | Out | shape | OpenBLAS ms | packed ms | ratio | max diff |\n");
	printf("| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n");
	for (size_t s = 0; s < sizeof sh / sizeof *sh; s++) {
		int M = sh[s].M, In = sh[s].In, Out = sh[s].Out, reps = Out > 10000 ? 5 : 30;
		float *x = filled((int64_t)M * In, 3 * (unsigned)s + 1);
		float *W = filled((int64_t)Out * In, 3 * (unsigned)s + 2);
		float *y1 = filled((int64_t)M * Out, 0), *y2 = filled((int64_t)M * Out, 0);
		float *P = filled(dl_sgemm_rows_floats(Out, In), 0);
		dl_sgemm_rows_pack(P, 1, W, In, Out, In);
		double best_blas = 1e30, best_rows = 1e30;
		for (int rep = 0; rep < reps; rep++) {
			double t0 = now_ms();
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, Out, In, 1.0f, x, In, W, In,
				    0.0f, y1, Out);
			double t1 = now_ms();
			dl_sgemm_rows(M, Out, In, x, In, P, y2, Out);
			double t2 = now_ms();
			best_blas = t1 - t0 < best_blas ? t1 - t0 : best_blas;
			best_rows = t2 - t1 < best_rows ? t2 - t1 : best_rows;
		}
		double md = 0.0;
		for (int64_t i = 0; i < (int64_t)M * Out; i++)
			md = fmax(md, fabs((double)y1[i] - (double)y2[i]));
		printf("| %d | %d | %d | %s | %.3f | %.3f | %.2f | %.1e |\n", M, In, Out, sh[s].what,
		       best_blas, best_rows, best_rows / best_blas, md);
		free(x), free(W), free(y1), free(y2), free(P);
	}
}

int main(int argc, char **argv)
{
	/* --avx2: dlrun's side on the AVX2 kernels (a CPU without AVX-512) */
	if (argc > 1 && strcmp(argv[1], "--avx2") == 0)
		printf("dl_sgemm_rows on kernel level %d (AVX2)\n", dl_sgemm_rows_kernels(1));

	static const struct { int M, K, N, nx, tb; const char *what; } sh[] = {
		{64, 64, 56, 36, 1, "resnet18 layer1, F(4x4), 224 b1 and b32"},
		{128, 128, 49, 36, 1, "resnet18 layer2, F(4x4), 224 b1"},
		{256, 256, 49, 16, 1, "resnet18 layer3, F(2x2), 224 b1"},
		{512, 512, 16, 16, 1, "resnet18 layer4, F(2x2), 224 b1"},
		{128, 128, 64, 36, 1, "resnet18 layer2, F(4x4), 64 b32"},
		{256, 256, 56, 16, 1, "resnet18 layer3, F(2x2), 224 b32"},
		{32, 128, 64, 36, 1, "densenet121 3x3, F(4x4)"},
		{32, 128, 16, 36, 1, "densenet121 3x3, F(4x4), 16 tiles"},
		{512, 4608, 49, 1, 0, "im2col: resnet18 layer4 3x3, 224 b1"},
		{512, 2304, 49, 1, 0, "im2col: resnet18 layer4.0.conv1 (stride 2), 224 b1"},
		{256, 1152, 196, 1, 0, "im2col: resnet18 layer3.0.conv1 (stride 2), 224 b1"},
		{128, 576, 784, 1, 0, "im2col: resnet18 layer2.0.conv1 (stride 2), 224 b1"},
		{64, 147, 1792, 1, 0, "im2col: resnet18 conv1 (7x7 stride 2), 16 rows"},
	};
	printf("| M | K | N | products | shape | OpenBLAS ms | dl_sgemm_rows ms | ratio | max diff |\n");
	printf("| ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n");
	for (size_t s = 0; s < sizeof sh / sizeof *sh; s++) {
		int M = sh[s].M, K = sh[s].K, N = sh[s].N, nx = sh[s].nx, tb = sh[s].tb;
		float *A = filled((int64_t)nx * M * K, 2 * (unsigned)s + 1);
		float *B = filled((int64_t)nx * N * K, 2 * (unsigned)s + 2);
		float *C1 = filled((int64_t)nx * M * N, 0), *C2 = filled((int64_t)nx * M * N, 0);
		float *P = filled(dl_sgemm_rows_floats(N, K), 0);
		double best_blas = 1e30, best_rows = 1e30;
		for (int rep = 0; rep < 30; rep++) {
			double t0 = now_ms();
			for (int x = 0; x < nx; x++)
				cblas_sgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
					    M, N, K, 1.0f, A + (int64_t)x * M * K, K,
					    B + (int64_t)x * N * K, tb ? K : N, 0.0f,
					    C1 + (int64_t)x * M * N, N);
			double t1 = now_ms();
			for (int x = 0; x < nx; x++) {
				dl_sgemm_rows_pack(P, tb, B + (int64_t)x * N * K, tb ? K : N, N, K);
				dl_sgemm_rows(M, N, K, A + (int64_t)x * M * K, K, P,
					      C2 + (int64_t)x * M * N, N);
			}
			double t2 = now_ms();
			best_blas = t1 - t0 < best_blas ? t1 - t0 : best_blas;
			best_rows = t2 - t1 < best_rows ? t2 - t1 : best_rows;
		}
		double md = 0.0;
		for (int64_t i = 0; i < (int64_t)nx * M * N; i++)
			md = fmax(md, fabs((double)C1[i] - (double)C2[i]));
		printf("| %d | %d | %d | %d | %s | %.3f | %.3f | %.2f | %.1e |\n", M, K, N, nx,
		       sh[s].what, best_blas, best_rows, best_rows / best_blas, md);
		free(A), free(B), free(C1), free(C2), free(P);
	}
	linear_table();
	return 0;
}
