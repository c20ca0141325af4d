/* The flash threshold's measurement: one dense causal attention slice (d =
 * 64) at T queries and keys, forward and backward, materialised (the
 * Tq x Tk scores) against the flash path (blocks, online softmax); the best
 * of 5 runs of each, and each path's scratch. Against the core's library:
 *
 *   cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Isrc \
 *      tools/bench/attention_slice.c src/.libs/libdlrun-core.a \
 *      -lyaml -ljansson -lz -lopenblas -lprotobuf-c -lmpi -lm -fopenmp \
 *      -o /tmp/attention_slice
 *   (with the -L paths of OpenBLAS and MPI that ./configure found)
 *   OPENBLAS_NUM_THREADS=1 /tmp/attention_slice 1024
 *
 * tools/bench/RESULTS.md has the numbers behind ATT_FLASH_MIN_CELLS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>

#include "ops/attention.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	int T = argc > 1 ? atoi(argv[1]) : 1024, d = 64;
	if (T < 1)
		return 2;
	size_t n = (size_t)T * d;
	float *q = malloc(4 * n), *k = malloc(4 * n), *v = malloc(4 * n);
	float *go = malloc(4 * n), *o = malloc(4 * n);
	float *dq = calloc(n, 4), *dk = calloc(n, 4), *dv = calloc(n, 4);
	if (!q || !k || !v || !go || !o || !dq || !dk || !dv)
		return 1;
	for (size_t i = 0; i < n; i++) {
		q[i] = sinf((float)i * 0.37f);
		k[i] = cosf((float)i * 0.11f);
		v[i] = sinf((float)i * 0.05f);
		go[i] = cosf((float)i * 0.3f);
	}
	for (int f = 0; f < 2; f++) {
		struct att a;
		memset(&a, 0, sizeof a);
		a.score = SC_SCALED;
		a.Tq = a.Tk = T;
		a.dq = a.dk = a.dv = d;
		a.scale = 0.125f;
		a.causal = 1;
		a.window = -1;
		a.dilation = 1;
		a.block = 1;
		a.keep_scale = 1.0f;
		att_prepare(&a);
		a.flash = f;
		struct att_ws w;
		size_t b = att_ws_layout(&a, 0, NULL, NULL);
		void *base = aligned_alloc(64, (b + 63) / 64 * 64 + 64);
		if (!base)
			return 1;
		att_ws_layout(&a, 0, base, &w);
		double bf = 1e9, bb = 1e9;
		for (int rep = 0; rep < 5; rep++) {
			double t0 = now();
			att_slice_fwd(&a, q, d, k, d, v, d, o, d, &w, NULL, NULL,
				      0.0);
			double t1 = now();
			att_slice_bwd(&a, q, d, k, d, v, d, go, d, dq, d, dk, d,
				      dv, d, &w, NULL);
			double t2 = now();
			bf = t1 - t0 < bf ? t1 - t0 : bf;
			bb = t2 - t1 < bb ? t2 - t1 : bb;
		}
		printf("T=%d %s fwd %.2f ms bwd %.2f ms scratch %.1f MB\n", T,
		       f ? "flash" : "materialised", bf * 1e3, bb * 1e3,
		       (double)b / 1e6);
		free(base);
	}
	return 0;
}
