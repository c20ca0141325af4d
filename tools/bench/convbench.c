/* Times one op of libdlrun in-process, the way `caffe time` does: the op is
 * set up through its descriptor (hyperparameters from the same YAML text a
 * model file holds), its buffers are allocated once as the engine's memory
 * plan would (input, output, parameters, the workspace infer asks for),
 * then forward runs a few times to warm up and K more times under the
 * clock. Process start-up, parsing and allocation are not timed.
 *
 *   convbench OP 'HYPERPARAMETERS' N,C,H,W [-t THREADS] [-k ITERATIONS]
 *             [-d DIR] [--backward]
 *
 * With -d DIR the input is read from DIR/x.npy and each parameter from
 * DIR/PARAM.npy, and the output is written to DIR/y_dlrun.npy, so a caller
 * can check that dlrun and PyTorch computed the same thing; otherwise the
 * values are uniform in [-1, 1). Prints one line:
 *   OP median_ms min_ms max_ms median_cpu_ms
 * (wall-clock milliseconds per forward call; CPU time of all threads).
 * tools/bench/conv.py builds and drives it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/gemm.h"
#include "engine/op.h"
#include "engine/rng.h"
#include "engine/threads.h"
#include "io/npy.h"
#include "model/hparams.h"
#include "ops/registry.h"

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* CPU time of the whole process (all threads): unlike the wall clock it
 * does not count time the process spent descheduled on a busy machine. */
static double cpu_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void *xmalloc(size_t n)
{
	void *p = aligned_alloc(64, (n + 63) / 64 * 64 + 64);
	if (!p) {
		fprintf(stderr, "convbench: out of memory\n");
		exit(1);
	}
	return p;
}

/* Reads DIR/NAME.npy into dst (numel floats); 0 when absent. */
static int read_into(const char *dir, const char *name, float *dst,
		     int64_t numel)
{
	char path[1024];
	snprintf(path, sizeof path, "%s/%s.npy", dir, name);
	FILE *f = fopen(path, "rb");
	if (!f)
		return 0;
	struct dl_tensor t;
	struct dl_error err = {0};
	if (dl_npy_read(f, path, &t, &err) != 1) {
		fprintf(stderr, "convbench: %s\n", err.msg);
		exit(2);
	}
	fclose(f);
	if (dl_shape_numel(&t.shape) != numel) {
		fprintf(stderr, "convbench: %s has %lld elements, the op needs %lld\n",
			path, (long long)dl_shape_numel(&t.shape), (long long)numel);
		exit(2);
	}
	memcpy(dst, t.data, (size_t)numel * sizeof(float));
	free(t.data);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: convbench OP 'HYPERPARAMETERS' N,C,H,W [-t THREADS] "
			"[-k ITERATIONS] [-d DIR] [--backward]\n");
		return 2;
	}
	const char *opname = argv[1], *hps = argv[2], *dir = NULL;
	int threads = 1, iters = 20, backward = 0;
	int64_t d[DL_MAX_DIMS];
	int nd = 0;
	for (char *p = argv[3]; *p && nd < DL_MAX_DIMS; ) {
		d[nd++] = strtoll(p, &p, 10);
		if (*p == ',')
			p++;
	}
	for (int i = 4; i < argc; i++) {
		if (!strcmp(argv[i], "-t") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-k") && i + 1 < argc)
			iters = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-d") && i + 1 < argc)
			dir = argv[++i];
		else if (!strcmp(argv[i], "--backward"))
			backward = 1;
		else {
			fprintf(stderr, "convbench: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (iters < 1)
		iters = 1;
	dl_set_threads(threads);

	const struct dl_op_desc *op = dl_op_find(opname);
	if (!op) {
		fprintf(stderr, "convbench: unknown op %s\n", opname);
		return 2;
	}
	struct dl_node n;
	struct dl_error err = {0};
	struct dl_shape xs = dl_shape_make(nd, d), ys;
	if (dl_node_setup(&n, op, hps, &err) || (n.n_in = 1, n.in = calloc(1, sizeof(int)),
						op->infer(&n, &xs, &ys, &err))) {
		fprintf(stderr, "convbench: %s\n", err.msg);
		return 2;
	}
	int64_t nx = dl_shape_numel(&xs), ny = dl_shape_numel(&ys);
	float *x = xmalloc((size_t)nx * sizeof(float));
	float *y = xmalloc((size_t)ny * sizeof(float));
	float *dy = xmalloc((size_t)ny * sizeof(float));
	float *dx = xmalloc((size_t)nx * sizeof(float));
	void *ws = xmalloc(n.ws_bytes);
	void *saved = xmalloc(n.saved_bytes);
	struct dl_rng rng;
	dl_rng_seed(&rng, 1);
	if (!dir || !read_into(dir, "x", x, nx))
		for (int64_t i = 0; i < nx; i++)
			x[i] = (float)(2.0 * dl_rng_uniform(&rng) - 1.0);
	for (int64_t i = 0; i < ny; i++)
		dy[i] = (float)(2.0 * dl_rng_uniform(&rng) - 1.0);
	for (int i = 0; i < n.n_params; i++) {
		struct dl_param *p = &n.params[i];
		int64_t k = dl_shape_numel(&p->shape);
		p->data = xmalloc((size_t)k * sizeof(float));
		p->grad = backward && !p->buffer ? xmalloc((size_t)k * sizeof(float)) : NULL;
		if (p->grad)
			memset(p->grad, 0, (size_t)k * sizeof(float));
		if (!dir || !read_into(dir, p->name, p->data, k))
			for (int64_t j = 0; j < k; j++)
				p->data[j] = p->init == DL_INIT_ONES ? 1.0f :
					     p->init == DL_INIT_ZEROS ? 0.0f :
					     (float)((2.0 * dl_rng_uniform(&rng) - 1.0) * p->init_arg);
	}
	struct dl_ctx ctx = {ws, backward ? saved : NULL, backward, &rng, threads};
	struct dl_tensor in = {xs, x}, out = {ys, y};
	float *din[1] = {dx};

	double *t = malloc((size_t)iters * sizeof *t);
	double *c = malloc((size_t)iters * sizeof *c);
	for (int r = -3; r < iters; r++) {
		double t0 = now_ms(), c0 = cpu_ms();
		op->forward(&n, &in, &out, &ctx);
		if (backward) {
			memset(dx, 0, (size_t)nx * sizeof(float));
			op->backward(&n, &in, &out, dy, din, &ctx);
		}
		if (r >= 0) {
			t[r] = now_ms() - t0;
			c[r] = cpu_ms() - c0;
		}
	}
	qsort(t, (size_t)iters, sizeof *t, cmp_double);
	qsort(c, (size_t)iters, sizeof *c, cmp_double);
	printf("%s %.4f %.4f %.4f %.4f\n", opname, t[iters / 2], t[0], t[iters - 1],
	       c[iters / 2]);

	if (dir) {
		/* the output of a fresh inference-mode forward, for checking */
		ctx.train = 0;
		ctx.saved = NULL;
		op->forward(&n, &in, &out, &ctx);
		char path[1024];
		snprintf(path, sizeof path, "%s/y_dlrun.npy", dir);
		FILE *f = fopen(path, "wb");
		if (!f || dl_npy_write(f, path, &out, &err) || fclose(f)) {
			fprintf(stderr, "convbench: cannot write %s\n", path);
			return 1;
		}
	}
	for (int i = 0; i < n.n_params; i++) {
		free(n.params[i].data);
		free(n.params[i].grad);
	}
	free(t);
	free(c);
	free(x);
	free(y);
	free(dy);
	free(dx);
	free(ws);
	free(saved);
	dl_node_release(&n);
	return 0;
}
