/* Convolution, pooling, upsampling and normalisation ops: PyTorch parity
 * of forward and gradients on the fixtures of tools/gen_conv_fixtures.py
 * (tests/data/conv/cases.txt) and tools/gen_reduce_fixtures.py
 * (tests/data/reduce/cases.txt: reductions, adaptive max pools, group and
 * instance norms) and tools/gen_3d_fixtures.py (tests/data/ops3d/cases.txt:
 * the 3-D convolutions, pools and batch norm), central finite-difference gradient checks
 * on the same cases, output sizes, batch-norm modes and running
 * statistics, default initialisation, the threaded and tiled paths
 * against a naive reference, zero-sample batches, and located errors for
 * bad hyperparameters and inputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check_suites.h"
#include "engine/fuse.h"
#include "engine/gemm.h"
#include "engine/threads.h"
#include "engine/op.h"
#include "engine/rng.h"
#include "io/npy.h"
#include "model/hparams.h"
#include "ops/registry.h"
#include "ops/spatial.h"

#ifndef SRCDIR
#define SRCDIR "."
#endif
#define DATA SRCDIR "/tests/data/conv"

/* the directories whose cases.txt list fixture cases */
static const char *const data_dirs[] = {DATA, SRCDIR "/tests/data/reduce",
					 SRCDIR "/tests/data/ops3d"};

/* ---- the fixture list ---- */

#define MAX_CASES 256

struct fcase {
	const char *dir;
	char name[96];
	char op[48];
	int train;
	char hps[256];
};

static struct fcase cases[MAX_CASES];
static int n_cases = -1;

static void copy_field(char *dst, size_t size, const char *src)
{
	size_t n = strlen(src);
	if (n >= size)
		n = size - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* Appends the cases of dir/cases.txt. */
static void load_dir(const char *dir)
{
	char path[512];
	snprintf(path, sizeof path, "%s/cases.txt", dir);
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	char line[512];
	while (fgets(line, sizeof line, f) && n_cases < MAX_CASES) {
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		struct fcase *c = &cases[n_cases];
		char *p1 = strchr(line, '|'), *p2 = p1 ? strchr(p1 + 1, '|') : NULL;
		char *p3 = p2 ? strchr(p2 + 1, '|') : NULL;
		if (!p3)
			continue;
		*p1 = *p2 = *p3 = '\0';
		c->dir = dir;
		copy_field(c->name, sizeof c->name, line);
		copy_field(c->op, sizeof c->op, p1 + 1);
		c->train = atoi(p2 + 1);
		copy_field(c->hps, sizeof c->hps, p3 + 1);
		n_cases++;
	}
	fclose(f);
}

static void load_cases(void)
{
	if (n_cases >= 0)
		return;
	n_cases = 0;
	for (size_t k = 0; k < sizeof data_dirs / sizeof *data_dirs; k++)
		load_dir(data_dirs[k]);
}

/* Reads DIR/NAME.WHAT.npy of case c; returns 0 when the file does not
 * exist. The caller frees t->data. */
static int load_npy(const struct fcase *c, const char *what, struct dl_tensor *t)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s.%s.npy", c->dir, c->name, what);
	FILE *f = fopen(path, "rb");
	if (!f)
		return 0;
	struct dl_error err = {0};
	int rc = dl_npy_read(f, path, t, &err);
	fclose(f);
	ck_assert_msg(rc == 1, "%s: %s", path, err.msg);
	return 1;
}

/* ||a - b||_inf / ||b||_inf (absolute when b is all zeros) */
static double rel_err(const float *a, const float *b, int64_t n)
{
	double num = 0.0, den = 0.0;
	for (int64_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);
		if (isnan(d))
			return INFINITY;
		if (d > num)
			num = d;
		if (fabs(b[i]) > den)
			den = fabs(b[i]);
	}
	return den > 0 ? num / den : num;
}

/* ---- a node with its buffers ---- */

struct harness {
	struct dl_node n;
	struct dl_shape xs, ys;
	int64_t nx, ny;
	float *x, *y, *gy, *dx;
	float *ws, *saved;
	struct dl_ctx ctx;
	struct dl_rng rng;
};

static int h_setup(struct harness *h, const char *op, const char *hps,
		   const struct dl_shape *xs, int train, struct dl_error *err)
{
	memset(h, 0, sizeof *h);
	const struct dl_op_desc *d = dl_op_find(op);
	ck_assert_msg(d != NULL, "op %s not registered", op);
	int rc = dl_node_setup(&h->n, d, hps, err);
	if (rc)
		return rc;
	h->n.n_in = 1;
	h->n.in = calloc(1, sizeof *h->n.in);
	h->xs = *xs;
	rc = d->infer(&h->n, &h->xs, &h->ys, err);
	if (rc)
		return rc;
	h->nx = dl_shape_numel(&h->xs);
	h->ny = dl_shape_numel(&h->ys);
	h->x = calloc((size_t)h->nx + 1, sizeof(float));
	h->dx = calloc((size_t)h->nx + 1, sizeof(float));
	h->y = calloc((size_t)h->ny + 1, sizeof(float));
	h->gy = calloc((size_t)h->ny + 1, sizeof(float));
	h->ws = malloc(h->n.ws_bytes + 16);
	h->saved = train ? malloc(h->n.saved_bytes + 16) : NULL;
	for (int i = 0; i < h->n.n_params; i++) {
		struct dl_param *p = &h->n.params[i];
		int64_t k = dl_shape_numel(&p->shape);
		p->data = calloc((size_t)k + 1, sizeof(float));
		p->grad = p->buffer ? NULL : calloc((size_t)k + 1, sizeof(float));
	}
	dl_rng_seed(&h->rng, 1234);
	h->ctx.ws = h->ws;
	h->ctx.saved = h->saved;
	h->ctx.train = train;
	h->ctx.rng = &h->rng;
	return 0;
}

/* h_setup for input sizes d [ndim], which must succeed */
static void h_open(struct harness *h, const char *op, const char *hps, int ndim,
		   const int64_t *d, int train)
{
	struct dl_error err = {0};
	struct dl_shape xs = dl_shape_make(ndim, d);
	ck_assert_msg(h_setup(h, op, hps, &xs, train, &err) == 0, "%s {%s}: %s", op, hps, err.msg);
}

static void h_free(struct harness *h)
{
	for (int i = 0; i < h->n.n_params; i++) {
		free(h->n.params[i].data);
		free(h->n.params[i].grad);
	}
	free(h->x);
	free(h->dx);
	free(h->y);
	free(h->gy);
	free(h->ws);
	free(h->saved);
	dl_node_release(&h->n);
}

static void h_forward(struct harness *h)
{
	struct dl_tensor in = {h->xs, h->x}, out = {h->ys, h->y};
	h->n.op->forward(&h->n, &in, &out, &h->ctx);
}

/* Zeroes dx and the parameter gradients, then runs backward with gy. */
static void h_backward(struct harness *h)
{
	memset(h->dx, 0, (size_t)h->nx * sizeof(float));
	for (int i = 0; i < h->n.n_params; i++)
		if (h->n.params[i].grad)
			memset(h->n.params[i].grad, 0,
			       (size_t)dl_shape_numel(&h->n.params[i].shape) * sizeof(float));
	struct dl_tensor in = {h->xs, h->x}, out = {h->ys, h->y};
	float *din[1] = {h->dx};
	h->n.op->backward(&h->n, &in, &out, h->gy, din, &h->ctx);
}

/* Fills x, then gy (if with_gy), then every parameter, in that order,
 * with uniform values in [-0.5, 0.5) from a generator seeded with seed. */
static void h_fill(struct harness *h, uint64_t seed, int with_gy)
{
	struct dl_rng r;
	dl_rng_seed(&r, seed);
	for (int64_t i = 0; i < h->nx; i++)
		h->x[i] = (float)dl_rng_uniform(&r) - 0.5f;
	for (int64_t i = 0; with_gy && i < h->ny; i++)
		h->gy[i] = (float)dl_rng_uniform(&r) - 0.5f;
	for (int i = 0; i < h->n.n_params; i++)
		for (int64_t j = 0; j < dl_shape_numel(&h->n.params[i].shape); j++)
			h->n.params[i].data[j] = (float)dl_rng_uniform(&r) - 0.5f;
}

static struct dl_param *h_param(struct harness *h, const char *name)
{
	for (int i = 0; i < h->n.n_params; i++)
		if (strcmp(h->n.params[i].name, name) == 0)
			return &h->n.params[i];
	return NULL;
}

/* Loads a fixture case into h: input, parameters and dL/dy. */
static void h_load_case(struct harness *h, const struct fcase *c)
{
	struct dl_tensor x, gy, t;
	struct dl_error err = {0};
	ck_assert_msg(load_npy(c, "x", &x), "%s: no input", c->name);
	int rc = h_setup(h, c->op, c->hps, &x.shape, c->train, &err);
	ck_assert_msg(rc == 0, "%s: %s", c->name, err.msg);
	memcpy(h->x, x.data, (size_t)h->nx * sizeof(float));
	free(x.data);
	ck_assert(load_npy(c, "gy", &gy));
	char a[64], b[64];
	ck_assert_msg(dl_shape_equal(&gy.shape, &h->ys), "%s: output shape %s, PyTorch's %s",
		      c->name, dl_shape_str(&h->ys, a, sizeof a),
		      dl_shape_str(&gy.shape, b, sizeof b));
	memcpy(h->gy, gy.data, (size_t)h->ny * sizeof(float));
	free(gy.data);
	for (int i = 0; i < h->n.n_params; i++) {
		struct dl_param *p = &h->n.params[i];
		char what[96];
		snprintf(what, sizeof what, "p.%s", p->name);
		ck_assert_msg(load_npy(c, what, &t), "%s: no fixture for parameter %s",
			      c->name, p->name);
		ck_assert_msg(dl_shape_equal(&t.shape, &p->shape), "%s: %s has shape %s, PyTorch's %s",
			      c->name, p->name, dl_shape_str(&p->shape, a, sizeof a),
			      dl_shape_str(&t.shape, b, sizeof b));
		memcpy(p->data, t.data, (size_t)dl_shape_numel(&p->shape) * sizeof(float));
		free(t.data);
	}
}

static void expect_close(const struct fcase *c, const char *what,
			 const float *got, int64_t n, double tol)
{
	struct dl_tensor t;
	ck_assert_msg(load_npy(c, what, &t), "%s: no %s", c->name, what);
	ck_assert_msg(dl_shape_numel(&t.shape) == n, "%s: %s has %lld elements, expected %lld",
		      c->name, what, (long long)n, (long long)dl_shape_numel(&t.shape));
	double e = rel_err(got, t.data, n);
	free(t.data);
	ck_assert_msg(e <= tol, "%s: %s differs from PyTorch: relative error %g > %g",
		      c->name, what, e, tol);
}

/* ---- PyTorch parity ---- */

START_TEST(test_fixture)
{
	load_cases();
	ck_assert_msg(n_cases > 0, "no cases in %s/cases.txt", DATA);
	const struct fcase *c = &cases[_i];
	struct harness h;
	h_load_case(&h, c);
	h_forward(&h);
	expect_close(c, "y", h.y, h.ny, 1e-5);
	for (int i = 0; i < h.n.n_params; i++) {
		struct dl_param *p = &h.n.params[i];
		if (!p->buffer || !c->train)
			continue;
		char what[96];
		snprintf(what, sizeof what, "after.%s", p->name);
		expect_close(c, what, p->data, dl_shape_numel(&p->shape), 1e-5);
	}
	h_backward(&h);
	expect_close(c, "gx", h.dx, h.nx, 1e-5);
	for (int i = 0; i < h.n.n_params; i++) {
		struct dl_param *p = &h.n.params[i];
		if (p->buffer)
			continue;
		char what[96];
		snprintf(what, sizeof what, "g.%s", p->name);
		expect_close(c, what, p->grad, dl_shape_numel(&p->shape), 1e-5);
	}
	h_free(&h);
}
END_TEST

/* ---- finite differences ---- */

/* L = sum y * gy in double. */
static double h_loss(struct harness *h)
{
	h_forward(h);
	double s = 0.0;
	for (int64_t i = 0; i < h->ny; i++)
		s += (double)h->y[i] * h->gy[i];
	return s;
}

/* Worst ||analytic - numeric||_inf / max(||numeric||_inf, 1e-2) over the
 * elements of v, whose analytic gradient is g. */
static double fd_check(struct harness *h, float *v, const float *g, int64_t n,
		       float eps)
{
	double num = 0.0, den = 1e-2;
	for (int64_t i = 0; i < n; i++) {
		float keep = v[i];
		v[i] = keep + eps;
		double lp = h_loss(h);
		v[i] = keep - eps;
		double lm = h_loss(h);
		v[i] = keep;
		double fd = (lp - lm) / (2.0 * (double)eps);
		double d = fabs(fd - g[i]);
		if (!(d <= num))
			num = d;
		if (fabs(fd) > den)
			den = fabs(fd);
	}
	return num / den;
}

START_TEST(test_gradcheck)
{
	load_cases();
	ck_assert_msg(n_cases > 0, "no cases in %s/cases.txt", DATA);
	const struct fcase *c = &cases[_i];
	struct harness h;
	h_load_case(&h, c);
	/* max pools and reductions: the fixture's inputs are 2/numel apart,
	 * so a step of eps never changes a window's winner; everything else
	 * is smooth or linear and takes a larger step for less float32
	 * noise. Tied extremes have no derivative: their gradient is only
	 * compared with PyTorch's. */
	if (strstr(c->name, "_ties")) {
		h_free(&h);
		return;
	}
	float eps = strstr(c->op, "max") || strcmp(c->op, "min") == 0 ? 2e-4f : 1e-2f;
	h_forward(&h);
	h_backward(&h);
	/* snapshot the analytic gradients: the FD loop reruns forward */
	float *gx = malloc((size_t)h.nx * sizeof(float));
	memcpy(gx, h.dx, (size_t)h.nx * sizeof(float));
	double e = fd_check(&h, h.x, gx, h.nx, eps);
	ck_assert_msg(e < 2e-3, "%s: dL/dx vs finite differences: relative error %g", c->name, e);
	free(gx);
	for (int i = 0; i < h.n.n_params; i++) {
		struct dl_param *p = &h.n.params[i];
		if (p->buffer)
			continue;
		int64_t k = dl_shape_numel(&p->shape);
		float *gp = malloc((size_t)k * sizeof(float));
		memcpy(gp, p->grad, (size_t)k * sizeof(float));
		e = fd_check(&h, p->data, gp, k, eps);
		ck_assert_msg(e < 2e-3, "%s: dL/d%s vs finite differences: relative error %g",
			      c->name, p->name, e);
		free(gp);
	}
	h_free(&h);
}
END_TEST

/* ---- semantics beyond the fixtures ---- */

/* Runs op on x [given shape] and returns the output shape. */
static struct dl_shape infer_shape(const char *op, const char *hps, int ndim,
				   const int64_t *d)
{
	struct harness h;
	struct dl_error err = {0};
	struct dl_shape xs = dl_shape_make(ndim, d);
	int rc = h_setup(&h, op, hps, &xs, 0, &err);
	ck_assert_msg(rc == 0, "%s {%s}: %s", op, hps, err.msg);
	struct dl_shape ys = h.ys;
	h_free(&h);
	return ys;
}

START_TEST(test_output_shapes)
{
	char s[64];
	struct { const char *op, *hps; int nd; int64_t in[4]; const char *want; } t[] = {
		/* same with stride 2: ceil(L / s) */
		{"conv2d", "out_channels: 2, kernel_size: 3, stride: 2, padding: same", 4,
		 {1, 3, 7, 8}, "[1, 2, 4, 4]"},
		{"conv1d", "out_channels: 2, kernel_size: 5, padding: valid", 3, {2, 1, 9},
		 "[2, 2, 5]"},
		{"conv2d", "out_channels: 4, kernel_size: [3, 2], stride: 2, padding: [[1, 0], [0, 2]]",
		 4, {1, 3, 8, 8}, "[1, 4, 4, 5]"},
		/* PyTorch's (L - 1) s - 2p + d (k - 1) + op + 1 */
		{"conv_transpose2d", "out_channels: 3, kernel_size: 4, stride: 2, padding: 1", 4,
		 {1, 2, 5, 5}, "[1, 3, 10, 10]"},
		{"conv_transpose1d", "out_channels: 1, kernel_size: 3, stride: 2, padding: [[0, 2]], output_padding: 1",
		 3, {1, 1, 4}, "[1, 1, 8]"},
		/* ceil_mode: the last window must start inside the input or
		 * its leading padding: 5 + 1 = 6, windows at 0, 2, 4 (and 6
		 * would start in the trailing padding) */
		{"max_pool1d", "kernel_size: 2, stride: 2, padding: 1, ceil_mode: true", 3,
		 {1, 1, 5}, "[1, 1, 3]"},
		{"max_pool1d", "kernel_size: 2, stride: 2, padding: [[1, 3]], ceil_mode: true", 3,
		 {1, 1, 5}, "[1, 1, 3]"},
		{"max_pool2d", "kernel_size: 3, stride: 2, ceil_mode: true", 4,
		 {1, 1, 6, 7}, "[1, 1, 3, 3]"},
		/* stride defaults to the kernel */
		{"avg_pool2d", "kernel_size: [2, 3]", 4, {1, 1, 6, 7}, "[1, 1, 3, 2]"},
		{"adaptive_avg_pool2d", "output_size: 1", 4, {2, 5, 3, 3}, "[2, 5, 1, 1]"},
		{"upsample", "scale_factor: [2, 1.5]", 4, {1, 1, 3, 3}, "[1, 1, 6, 4]"},
		{"upsample", "scale_factor: 0.4, mode: linear", 3, {1, 1, 6}, "[1, 1, 2]"},
		{"conv2d", "out_channels: 4, kernel_size: 3, padding: 1", 4, {0, 3, 5, 5},
		 "[0, 4, 5, 5]"},
	};
	for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
		struct dl_shape ys = infer_shape(t[i].op, t[i].hps, t[i].nd, t[i].in);
		ck_assert_msg(strcmp(dl_shape_str(&ys, s, sizeof s), t[i].want) == 0,
			      "%s {%s}: output %s, expected %s", t[i].op, t[i].hps, s, t[i].want);
	}
}
END_TEST

/* Padding beyond half the kernel: windows over padding only give -inf
 * (max) and 0 (average without counting padding). */
START_TEST(test_pool_all_padding_windows)
{
	struct harness h;
	struct dl_error err = {0};
	int64_t d[3] = {1, 1, 2};
	struct dl_shape xs = dl_shape_make(3, d);
	ck_assert(h_setup(&h, "max_pool1d", "kernel_size: 2, padding: 3", &xs, 0, &err) == 0);
	ck_assert_int_eq(h.ys.d[2], 4);
	h.x[0] = 1.0f;
	h.x[1] = 2.0f;
	h_forward(&h);
	ck_assert(isinf(h.y[0]) && h.y[0] < 0);
	ck_assert(h.y[1] == 1.0f);   /* window [pad, x0] */
	ck_assert(h.y[2] == 2.0f);   /* [x1, pad] */
	ck_assert(isinf(h.y[3]) && h.y[3] < 0);
	for (int i = 0; i < 4; i++)
		h.gy[i] = 1.0f;
	h_backward(&h);
	ck_assert(h.dx[0] == 1.0f && h.dx[1] == 1.0f);
	h_free(&h);

	ck_assert(h_setup(&h, "avg_pool1d", "kernel_size: 2, padding: 3, count_include_pad: false",
			  &xs, 0, &err) == 0);
	h.x[0] = 1.0f;
	h.x[1] = 2.0f;
	h_forward(&h);
	ck_assert(h.y[0] == 0.0f && h.y[1] == 1.0f && h.y[2] == 2.0f && h.y[3] == 0.0f);
	h_free(&h);

	ck_assert(h_setup(&h, "avg_pool1d", "kernel_size: 2, padding: 3", &xs, 0, &err) == 0);
	h.x[0] = 1.0f;
	h.x[1] = 2.0f;
	h_forward(&h);
	ck_assert(h.y[0] == 0.0f && h.y[1] == 0.5f && h.y[2] == 1.0f && h.y[3] == 0.0f);
	h_free(&h);
}
END_TEST

/* Padded max pools' backward: windows inside the input take the
 * vectorised winner search, border windows the bounds-checked one; dx
 * must be the same bits as one scan of every window in output order,
 * each window's winner the first cell, replaced by a larger value or a
 * NaN (PyTorch's rule). Values are drawn from 7 levels (ties
 * everywhere), with -inf and NaN cells, at odd sizes, strides,
 * dilations and ceil_mode. */
START_TEST(test_maxpool_padded_backward_bits)
{
	struct { const char *hps; int64_t d[4]; } t[] = {
		{"kernel_size: 3, stride: 2, padding: 1", {2, 3, 13, 11}},
		{"kernel_size: 3, stride: 1, padding: 1", {1, 2, 9, 10}},
		{"kernel_size: [3, 2], stride: [2, 3], padding: [1, 1], ceil_mode: true", {1, 2, 12, 17}},
		{"kernel_size: 3, stride: 2, padding: 1, dilation: 2", {1, 3, 15, 14}},
		{"kernel_size: 5, stride: 3, padding: 2", {2, 1, 4, 30}},
	};
	for (size_t c = 0; c < sizeof t / sizeof *t; c++) {
		struct harness h;
		h_open(&h, "max_pool2d", t[c].hps, 4, t[c].d, 1);
		struct dl_rng r;
		dl_rng_seed(&r, 77 + c);
		for (int64_t i = 0; i < h.nx; i++) {
			int lv = (int)(dl_rng_uniform(&r) * 9.0);
			h.x[i] = lv == 7 ? -INFINITY : lv == 8 && i % 5 == 0 ? NAN
								      : (float)(lv % 7) * 0.25f;
		}
		for (int64_t i = 0; i < h.ny; i++)
			h.gy[i] = (float)dl_rng_uniform(&r) - 0.5f;
		h_forward(&h);
		h_backward(&h);
		/* the reference scan */
		int64_t N = h.xs.d[0] * h.xs.d[1], H = h.xs.d[2], W = h.xs.d[3];
		int64_t OH = h.ys.d[2], OW = h.ys.d[3];
		int64_t kh, kw, sh, sw, ph, pw, dh, dw;
		/* each case's kernel, stride, padding and dilation */
		int64_t geo[5][8] = {
			{3, 3, 2, 2, 1, 1, 1, 1}, {3, 3, 1, 1, 1, 1, 1, 1},
			{3, 2, 2, 3, 1, 1, 1, 1}, {3, 3, 2, 2, 1, 1, 2, 2},
			{5, 5, 3, 3, 2, 2, 1, 1},
		};
		kh = geo[c][0], kw = geo[c][1], sh = geo[c][2], sw = geo[c][3];
		ph = geo[c][4], pw = geo[c][5], dh = geo[c][6], dw = geo[c][7];
		float *ref = calloc((size_t)h.nx, sizeof(float));
		for (int64_t p = 0; p < N; p++)
			for (int64_t oh = 0; oh < OH; oh++)
				for (int64_t ow = 0; ow < OW; ow++) {
					int64_t best = -1;
					float m = -INFINITY;
					for (int64_t i = 0; i < kh; i++)
						for (int64_t j = 0; j < kw; j++) {
							int64_t ih = oh * sh - ph + i * dh;
							int64_t iw = ow * sw - pw + j * dw;
							if (ih < 0 || ih >= H || iw < 0 || iw >= W)
								continue;
							float v = h.x[p * H * W + ih * W + iw];
							if (best < 0)
								best = ih * W + iw;
							if (v > m || v != v) {
								m = v;
								best = ih * W + iw;
							}
						}
					if (best >= 0)
						ref[p * H * W + best] += h.gy[(p * OH + oh) * OW + ow];
				}
		ck_assert_msg(memcmp(ref, h.dx, (size_t)h.nx * sizeof(float)) == 0,
			      "max_pool2d {%s}: dx differs from the reference scan", t[c].hps);
		free(ref);
		h_free(&h);
	}
}
END_TEST

/* Train mode: batch statistics, running stats moved by momentum with the
 * unbiased variance; eval mode then uses them. */
START_TEST(test_batch_norm_modes)
{
	struct harness h;
	struct dl_error err = {0};
	int64_t d[2] = {4, 1};
	struct dl_shape xs = dl_shape_make(2, d);
	ck_assert(h_setup(&h, "batch_norm1d", "momentum: 0.5", &xs, 1, &err) == 0);
	struct dl_param *w = h_param(&h, "weight"), *b = h_param(&h, "bias");
	struct dl_param *rm = h_param(&h, "running_mean"), *rv = h_param(&h, "running_var");
	ck_assert(w && b && rm && rv && rm->buffer && rv->buffer && !w->buffer);
	ck_assert(rm->grad == NULL);
	w->data[0] = 1.0f;
	b->data[0] = 0.0f;
	rm->data[0] = 0.0f;
	rv->data[0] = 1.0f;
	float x[4] = {1, 2, 3, 6};   /* mean 3, biased var 3.5, unbiased 14/3 */
	memcpy(h.x, x, sizeof x);
	h_forward(&h);
	ck_assert(fabsf(h.y[0] - (1 - 3) / sqrtf(3.5f + 1e-5f)) < 1e-6f);
	ck_assert(fabsf(rm->data[0] - 1.5f) < 1e-6f);
	ck_assert(fabsf(rv->data[0] - (0.5f + 0.5f * 14.0f / 3.0f)) < 1e-5f);
	/* eval: (x - 1.5) / sqrt(rv + eps), stats unchanged */
	h.ctx.train = 0;
	h.ctx.saved = NULL;
	float rv_now = rv->data[0];
	h_forward(&h);
	ck_assert(fabsf(h.y[3] - (6 - 1.5f) / sqrtf(rv_now + 1e-5f)) < 1e-5f);
	ck_assert(rm->data[0] == 1.5f && rv->data[0] == rv_now);
	h_free(&h);

	/* track_running_stats: false has no buffers and always uses the batch */
	ck_assert(h_setup(&h, "batch_norm1d", "track_running_stats: false, affine: false",
			  &xs, 0, &err) == 0);
	ck_assert_int_eq(h.n.n_params, 0);
	memcpy(h.x, x, sizeof x);
	h_forward(&h);
	ck_assert(fabsf(h.y[0] - (1 - 3) / sqrtf(3.5f + 1e-5f)) < 1e-6f);
	h_free(&h);
}
END_TEST

/* Default initialisation: conv U(+-1/sqrt(fan_in)), fan_in = in/groups *
 * kernel; transposed reads it from weight dim 1; norms ones and zeros. */
START_TEST(test_param_init)
{
	struct harness h;
	struct dl_error err = {0};
	int64_t d[4] = {1, 6, 5, 5};
	struct dl_shape xs = dl_shape_make(4, d);
	ck_assert(h_setup(&h, "conv2d", "out_channels: 4, kernel_size: [3, 2], groups: 2",
			  &xs, 0, &err) == 0);
	ck_assert_int_eq(h.n.n_params, 2);
	ck_assert(h.n.params[0].init == DL_INIT_UNIFORM);
	ck_assert(fabs(h.n.params[0].init_arg - 1.0 / sqrt(3 * 3 * 2)) < 1e-12);
	ck_assert(fabs(h.n.params[1].init_arg - 1.0 / sqrt(3 * 3 * 2)) < 1e-12);
	char s[64];
	ck_assert_str_eq(dl_shape_str(&h.n.params[0].shape, s, sizeof s), "[4, 3, 3, 2]");
	h_free(&h);
	ck_assert(h_setup(&h, "conv_transpose2d", "out_channels: 4, kernel_size: 3, groups: 2, bias: false",
			  &xs, 0, &err) == 0);
	ck_assert_int_eq(h.n.n_params, 1);
	ck_assert_str_eq(dl_shape_str(&h.n.params[0].shape, s, sizeof s), "[6, 2, 3, 3]");
	ck_assert(fabs(h.n.params[0].init_arg - 1.0 / sqrt(2 * 9)) < 1e-12);
	h_free(&h);
	ck_assert(h_setup(&h, "batch_norm2d", "", &xs, 0, &err) == 0);
	ck_assert_int_eq(h.n.n_params, 4);
	ck_assert(h_param(&h, "weight")->init == DL_INIT_ONES);
	ck_assert(h_param(&h, "bias")->init == DL_INIT_ZEROS);
	ck_assert(h_param(&h, "running_mean")->init == DL_INIT_ZEROS);
	ck_assert(h_param(&h, "running_var")->init == DL_INIT_ONES);
	h_free(&h);
	ck_assert(h_setup(&h, "layer_norm", "normalized_shape: [5, 5]", &xs, 0, &err) == 0);
	ck_assert_str_eq(dl_shape_str(&h_param(&h, "weight")->shape, s, sizeof s), "[5, 5]");
	h_free(&h);
}
END_TEST

/* Conv on a batch of 3 equals three convs of one sample (the per-image
 * loop and the thread split must not mix samples up), with a larger
 * input than the fixtures so that OpenMP and BLAS threads engage. */
START_TEST(test_conv_batch_consistency)
{
	const char *hps[] = {
		"out_channels: 16, kernel_size: 3, padding: 1",
		"out_channels: 16, kernel_size: 3, padding: 1, groups: 16",
		"out_channels: 8, kernel_size: 1",
		"out_channels: 8, kernel_size: 4, stride: 2, padding: 1",
	};
	const char *ops[] = {"conv2d", "conv2d", "conv2d", "conv_transpose2d"};
	for (int t = 0; t < 4; t++) {
		struct harness hb, h1;
		struct dl_error err = {0};
		int64_t d[4] = {3, 16, 20, 19};
		struct dl_shape xs = dl_shape_make(4, d);
		ck_assert(h_setup(&hb, ops[t], hps[t], &xs, 0, &err) == 0);
		d[0] = 1;
		xs = dl_shape_make(4, d);
		ck_assert(h_setup(&h1, ops[t], hps[t], &xs, 0, &err) == 0);
		h_fill(&hb, 7 + t, 1);
		for (int i = 0; i < hb.n.n_params; i++)
			memcpy(h1.n.params[i].data, hb.n.params[i].data,
			       (size_t)dl_shape_numel(&hb.n.params[i].shape) * sizeof(float));
		h_forward(&hb);
		h_backward(&hb);
		for (int s = 0; s < 3; s++) {
			memcpy(h1.x, hb.x + s * h1.nx, (size_t)h1.nx * sizeof(float));
			memcpy(h1.gy, hb.gy + s * h1.ny, (size_t)h1.ny * sizeof(float));
			h_forward(&h1);
			ck_assert_msg(rel_err(h1.y, hb.y + s * h1.ny, h1.ny) < 1e-6,
				      "%s {%s}: sample %d differs", ops[t], hps[t], s);
			h_backward(&h1);
			ck_assert(rel_err(h1.dx, hb.dx + s * h1.nx, h1.nx) < 1e-6);
		}
		h_free(&hb);
		h_free(&h1);
	}
}
END_TEST

/* Two threads split the work into units (images, groups, row tiles,
 * Winograd blocks) with private weight-gradient copies summed at the end:
 * the results must match one thread's up to summation order. */
START_TEST(test_conv_threads)
{
	const char *hps[] = {
		"out_channels: 16, kernel_size: 3, padding: 1",                /* Winograd */
		"out_channels: 6, kernel_size: [3, 2], stride: 2, padding: [[1, 0], [2, 1]]",
		"out_channels: 16, kernel_size: 3, padding: 1, groups: 16",    /* depthwise */
		"out_channels: 8, kernel_size: 1",                             /* pointwise */
		"out_channels: 8, kernel_size: 4, stride: 2, padding: 1",      /* transposed */
		"out_channels: 8, kernel_size: 1",                             /* transposed 1x1 */
		"out_channels: 32, kernel_size: 3, padding: 1, groups: 2",     /* Winograd, groups */
	};
	const char *ops[] = {"conv2d", "conv2d", "conv2d", "conv2d", "conv_transpose2d",
			     "conv_transpose2d", "conv2d"};
	int keep = dl_threads();
	for (int t = 0; t < 7; t++) {
		struct harness h[2];
		int64_t d[4] = {3, 16, 21, 18};
		struct dl_shape xs = dl_shape_make(4, d);
		for (int k = 0; k < 2; k++) {
			struct dl_error err = {0};
			dl_set_threads(k + 1);
			ck_assert(h_setup(&h[k], ops[t], hps[t], &xs, 0, &err) == 0);
			h_fill(&h[k], 11 + t, 1);
			h_forward(&h[k]);
			h_backward(&h[k]);
		}
		ck_assert_msg(rel_err(h[1].y, h[0].y, h[0].ny) < 1e-6, "%s {%s}: y", ops[t], hps[t]);
		ck_assert_msg(rel_err(h[1].dx, h[0].dx, h[0].nx) < 1e-6, "%s {%s}: dx", ops[t], hps[t]);
		for (int i = 0; i < h[0].n.n_params; i++)
			ck_assert_msg(rel_err(h[1].n.params[i].grad, h[0].n.params[i].grad,
					      dl_shape_numel(&h[0].n.params[i].shape)) < 1e-5,
				      "%s {%s}: d%s", ops[t], hps[t], h[0].n.params[i].name);
		h_free(&h[0]);
		h_free(&h[1]);
	}
	dl_set_threads(keep);
}
END_TEST

/* Two threads asked for, one or two running (another process holding a
 * core makes dlrun run fewer): the same bits, forward and backward, so a
 * training run's result does not depend on the machine's load. */
START_TEST(test_conv_team_invariant)
{
	const char *hps[] = {
		"out_channels: 16, kernel_size: 3, padding: 1",                /* Winograd */
		"out_channels: 6, kernel_size: [3, 2], stride: 2, padding: [[1, 0], [2, 1]]",
		"out_channels: 8, kernel_size: 1",                             /* pointwise */
		"out_channels: 8, kernel_size: 4, stride: 2, padding: 1",      /* transposed */
		"out_channels: 96, kernel_size: 3, padding: 1",                /* split GEMM */
		"out_channels: 64, kernel_size: 3, padding: 1, groups: 64",    /* depthwise */
		"out_channels: 128, kernel_size: 3, stride: 2, padding: 1, groups: 64",
		/* planes under 64 cells: the batched pointwise forward and
		 * the backward in groups of images (bwd_group) */
		"out_channels: 48, kernel_size: 1",
		"out_channels: 96, kernel_size: 3, padding: 1",
	};
	const char *ops[] = {"conv2d", "conv2d", "conv2d", "conv_transpose2d", "conv2d",
			     "conv2d", "conv2d", "conv2d", "conv2d"};
	int keep = dl_threads();
	for (int t = 0; t < 9; t++) {
		struct harness h[2];
		int64_t d[4] = {t < 7 ? 5 : 13, 64, t < 7 ? 29 : 3, t < 7 ? 27 : 5};
		struct dl_shape xs = dl_shape_make(4, d);
		for (int k = 0; k < 2; k++) {
			struct dl_error err = {0};
			dl_set_threads(2);
			dl_threads_pin(k + 1);
			ck_assert(h_setup(&h[k], ops[t], hps[t], &xs, 0, &err) == 0);
			h_fill(&h[k], 21 + t, 1);
			h_forward(&h[k]);
			h_backward(&h[k]);
		}
		ck_assert_msg(memcmp(h[1].y, h[0].y, (size_t)h[0].ny * sizeof(float)) == 0,
			      "%s {%s}: y", ops[t], hps[t]);
		ck_assert_msg(memcmp(h[1].dx, h[0].dx, (size_t)h[0].nx * sizeof(float)) == 0,
			      "%s {%s}: dx", ops[t], hps[t]);
		for (int i = 0; i < h[0].n.n_params; i++)
			ck_assert_msg(memcmp(h[1].n.params[i].grad, h[0].n.params[i].grad,
					     (size_t)dl_shape_numel(&h[0].n.params[i].shape) * sizeof(float)) == 0,
				      "%s {%s}: d%s", ops[t], hps[t], h[0].n.params[i].name);
		h_free(&h[0]);
		h_free(&h[1]);
	}
	dl_set_threads(keep);
}
END_TEST

/* Batch 1: one unit (a Winograd block, a tile of columns, a pointwise
 * product) shared by the threads (conv.c's shared_units). Two threads
 * asked for, one or two running: the same bits; one thread asked for
 * against two: split by output channel, Winograd's and the 56-column
 * im2col unit's (each thread's rows of dl_sgemm_rows) keep the bits, the
 * pointwise product's (rows of OpenBLAS's) stays within 1e-6. */
START_TEST(test_conv_batch1_shared)
{
	const char *hps[] = {
		"out_channels: 64, kernel_size: 3, padding: 1",                /* F(4x4), 1 block */
		"out_channels: 96, kernel_size: 3, padding: 1, groups: 2",     /* F(4x4), a group per thread */
		"out_channels: 128, kernel_size: 3, stride: 2, padding: 1",    /* im2col, 1 tile */
		"out_channels: 200, kernel_size: 1",                           /* pointwise */
	};
	int keep = dl_threads();
	for (int t = 0; t < 4; t++) {
		struct harness h[3];
		int64_t d[4] = {1, 64, 15, 13};
		struct dl_shape xs = dl_shape_make(4, d);
		for (int k = 0; k < 3; k++) {
			struct dl_error err = {0};
			dl_set_threads(k == 0 ? 1 : 2);
			if (k > 0)
				dl_threads_pin(k);
			ck_assert(h_setup(&h[k], "conv2d", hps[t], &xs, 0, &err) == 0);
			h_fill(&h[k], 31 + t, 1);
			h_forward(&h[k]);
		}
		ck_assert_msg(memcmp(h[1].y, h[2].y, (size_t)h[1].ny * sizeof(float)) == 0,
			      "{%s}: one or two threads running", hps[t]);
		ck_assert_msg(rel_err(h[2].y, h[0].y, h[0].ny) < 1e-6, "{%s}: 1 or 2 threads", hps[t]);
		if (t < 3)
			ck_assert_msg(memcmp(h[0].y, h[2].y, (size_t)h[0].ny * sizeof(float)) == 0,
				      "{%s}: Winograd's and dl_sgemm_rows's bits at 1 and 2 threads",
				      hps[t]);
		for (int k = 0; k < 3; k++)
			h_free(&h[k]);
	}
	dl_set_threads(keep);
}
END_TEST

/* im2col units of few columns that are not skinny (conv.c's rows_cols:
 * at most 64, a panel-rounded count within the output channels) multiply
 * through dl_sgemm_rows: each output exactly the fmaf chain over the
 * columns' rows (input channel, kernel row, kernel column) from zero,
 * then the bias. Batch 3 and 1 (a unit shared by two threads there), 1
 * and 2 threads, 42, 49 and 63 columns, K of 40, 171 and 555 (three of
 * dl_sgemm_rows's blocks of k), odd output channels, a pointwise layer. */
START_TEST(test_conv_rows_exact)
{
	static const struct {
		const char *hps;
		int64_t in[4];
		int kh, kw, s, ph, pw;
	} t[] = {
		{"out_channels: 53, kernel_size: 3, stride: 2, padding: 1", {3, 19, 13, 11}, 3, 3, 2, 1, 1},
		{"out_channels: 64, kernel_size: [3, 5], padding: [1, 2]", {2, 37, 7, 9}, 3, 5, 1, 1, 2},
		{"out_channels: 64, kernel_size: [3, 5], padding: [1, 2]", {1, 37, 7, 9}, 3, 5, 1, 1, 2},
		{"out_channels: 53, kernel_size: 3, stride: 2, padding: 1", {1, 19, 13, 11}, 3, 3, 2, 1, 1},
		/* pointwise at batch 1 on a 7x7 plane: its input in place */
		{"out_channels: 70, kernel_size: 1", {1, 40, 7, 7}, 1, 1, 1, 0, 0},
	};
	int keep = dl_threads();
	for (size_t k = 0; k < sizeof t / sizeof *t; k++)
		for (int threads = 1; threads <= 2; threads++) {
			struct harness h;
			struct dl_error err = {0};
			struct dl_shape xs = dl_shape_make(4, t[k].in);
			dl_set_threads(threads);
			if (threads > 1)
				dl_threads_pin(threads);
			ck_assert(h_setup(&h, "conv2d", t[k].hps, &xs, 0, &err) == 0);
			h_fill(&h, 41 + k, 0);
			h_forward(&h);
			const float *w = h_param(&h, "weight")->data, *b = h_param(&h, "bias")->data;
			int64_t N = t[k].in[0], C = t[k].in[1], H = t[k].in[2], W = t[k].in[3];
			int64_t OC = h.ys.d[1], OH = h.ys.d[2], OW = h.ys.d[3];
			for (int64_t n = 0; n < N; n++)
				for (int64_t o = 0; o < OC; o++)
					for (int64_t p = 0; p < OH * OW; p++) {
						float acc = 0.0f;
						for (int64_t c = 0; c < C; c++)
							for (int i = 0; i < t[k].kh; i++)
								for (int j = 0; j < t[k].kw; j++) {
									int64_t ih = p / OW * t[k].s - t[k].ph + i;
									int64_t iw = p % OW * t[k].s - t[k].pw + j;
									float xv = ih >= 0 && ih < H && iw >= 0 && iw < W ?
										h.x[((n * C + c) * H + ih) * W + iw] : 0.0f;
									acc = fmaf(w[((o * C + c) * t[k].kh + i) * t[k].kw + j],
										   xv, acc);
								}
						float e = acc + b[o], got = h.y[(n * OC + o) * OH * OW + p];
						ck_assert_msg(memcmp(&e, &got, sizeof e) == 0,
							      "{%s} batch %lld, %d threads: y[%lld, %lld, %lld] %.9g, the chain %.9g",
							      t[k].hps, (long long)N, threads, (long long)n,
							      (long long)o, (long long)p, got, e);
					}
			h_free(&h);
		}
	dl_set_threads(keep);
}
END_TEST

/* Inference with fixed weights whose Winograd transform is not kept
 * (the plan's budget ran out) and would not pay for itself at each call
 * (conv.c's wino_pays: a 7x7 output at batch 1 saves 185 multiply-adds
 * per channel pair) runs through im2col: its output has the bits of the
 * one GEMM of the weights and the columns, OpenBLAS's, or on a CPU with
 * 512-bit FMA units (dl_sgemm_rows_wide) dl_sgemm_rows's; both are
 * tried where the AVX-512 kernels run. Kept, the same layer runs as
 * Winograd, within 1e-5 of it. */
START_TEST(test_conv_unkept_im2col)
{
	int keep = dl_threads();
	dl_set_threads(1);
	int64_t d[4] = {1, 16, 7, 7};
	struct dl_shape xs = dl_shape_make(4, d);
	for (int wide = 0; wide < 2; wide++) {
		if (dl_sgemm_rows_wide_set(wide) != wide)
			continue;
		struct harness h[2];
		for (int k = 0; k < 2; k++) {
			struct dl_error err = {0};
			ck_assert(h_setup(&h[k], "conv2d",
					  "out_channels: 32, kernel_size: 3, padding: 1, bias: false",
					  &xs, 0, &err) == 0);
			h[k].ctx.fixed_weights = 1;
			h[k].n.keep = k;
			h_fill(&h[k], 77, 0);   /* x, then the weight (no bias) */
			h_forward(&h[k]);
		}
		float *col = calloc(144 * 49, sizeof(float)), *ref = calloc(32 * 49, sizeof(float));
		float *pan = calloc((size_t)dl_sgemm_rows_floats(49, 144), sizeof(float));
		for (int c = 0; c < 16; c++)
			for (int i = 0; i < 3; i++)
				for (int j = 0; j < 3; j++)
					for (int oh = 0; oh < 7; oh++)
						for (int ow = 0; ow < 7; ow++) {
							int ih = oh - 1 + i, iw = ow - 1 + j;
							if (ih >= 0 && ih < 7 && iw >= 0 && iw < 7)
								col[(c * 9 + i * 3 + j) * 49 + oh * 7 + ow] =
									h[0].x[(c * 7 + ih) * 7 + iw];
						}
		if (wide) {
			dl_sgemm_rows_pack(pan, 0, col, 49, 49, 144);
			dl_sgemm_rows(32, 49, 144, h[0].n.params[0].data, 144, pan, ref, 49);
		} else {
			dl_sgemm(0, 0, 32, 49, 144, 1.0f, h[0].n.params[0].data, 144, col, 49, 0.0f,
				 ref, 49);
		}
		ck_assert_msg(memcmp(h[0].y, ref, 32 * 49 * sizeof(float)) == 0,
			      "not kept: the im2col GEMM's bits (%s)",
			      wide ? "dl_sgemm_rows" : "OpenBLAS");
		ck_assert_msg(rel_err(h[1].y, ref, 32 * 49) < 1e-5, "kept (Winograd): %g",
			      rel_err(h[1].y, ref, 32 * 49));
		free(col);
		free(ref);
		free(pan);
		for (int k = 0; k < 2; k++)
			h_free(&h[k]);
	}
	dl_sgemm_rows_wide_set(-1);
	dl_set_threads(keep);
}
END_TEST

/* The same for one product large enough to be shared among threads. */
START_TEST(test_sgemm_team_invariant)
{
	int M = 301, N = 257, K = 129;
	float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
	float *c[2] = {malloc(sizeof(float) * M * N), malloc(sizeof(float) * M * N)};
	struct dl_rng r;
	dl_rng_seed(&r, 5);
	for (int i = 0; i < M * K; i++)
		a[i] = (float)dl_rng_uniform(&r) - 0.5f;
	for (int i = 0; i < K * N; i++)
		b[i] = (float)dl_rng_uniform(&r) - 0.5f;
	int keep = dl_threads();
	for (int k = 0; k < 2; k++) {
		dl_set_threads(2);
		dl_threads_pin(k + 1);
		dl_sgemm(0, 0, M, N, K, 1.0f, a, K, b, N, 0.0f, c[k], N);
	}
	ck_assert(memcmp(c[0], c[1], sizeof(float) * M * N) == 0);
	dl_set_threads(keep);
	free(a);
	free(b);
	free(c[0]);
	free(c[1]);
}
END_TEST

/* Convolutions below 2^21 multiply-adds (conv.c's CONV_SPLIT_MACS, batch
 * included) run their forward on one thread whatever the count asked for:
 * at batch 1 the GEMM takes about what waking a worker costs. Depthwise
 * layers are exempt; at or above the line, the threads asked for. */
START_TEST(test_conv_small_one_thread)
{
	struct {
		const char *op, *hps;
		int64_t in[4];
		int ndim, two;   /* threads at 2 asked for */
	} t[] = {
		{"conv2d", "out_channels: 64, kernel_size: 1", {1, 64, 16, 32}, 4, 2},  /* 2^21 */
		{"conv2d", "out_channels: 64, kernel_size: 1", {1, 64, 16, 31}, 4, 1},  /* 2^21 - 2^16 */
		{"conv2d", "out_channels: 16, kernel_size: 3, padding: 1", {1, 16, 8, 8}, 4, 1},
		{"conv2d", "out_channels: 16, kernel_size: 3, padding: 1", {32, 16, 8, 8}, 4, 2},
		{"conv2d", "out_channels: 16, kernel_size: 3, padding: 1, groups: 16", {1, 16, 8, 8}, 4, 2},
		{"conv_transpose2d", "out_channels: 8, kernel_size: 4, stride: 2, padding: 1",
		 {1, 8, 5, 5}, 4, 1},
		{"conv1d", "out_channels: 32, kernel_size: 3", {1, 32, 40}, 3, 1},
	};
	int keep = dl_threads();
	for (size_t k = 0; k < sizeof t / sizeof *t; k++)
		for (int threads = 1; threads <= 2; threads++) {
			struct harness h;
			dl_set_threads(threads);
			h_open(&h, t[k].op, t[k].hps, t[k].ndim, t[k].in, 0);
			int want = threads == 1 ? 1 : t[k].two;
			ck_assert_msg(dl_conv_forward_threads(&h.n, &h.xs) == want,
				      "%s {%s}, %d asked for: %d threads, expected %d", t[k].op,
				      t[k].hps, threads, dl_conv_forward_threads(&h.n, &h.xs), want);
			h_free(&h);
		}
	dl_set_threads(keep);
}
END_TEST

/* dl_sgemm shares a product of 2^22 multiply-adds or more among the
 * threads asked for, but never inside a parallel region, an inactive one
 * (`if` false, or a team of one) included: a team nested in it would be
 * made of threads created at every call. Nor while dl_sgemm_whole is on. */
START_TEST(test_sgemm_split_regions)
{
	int keep = dl_threads();
	int M = 256, N = 128, K = 128;   /* 2^22 */
	dl_set_threads(1);
	ck_assert_int_eq(dl_sgemm_blocks(M, N, K), 1);
	dl_set_threads(2);
#ifdef _OPENMP
	ck_assert_int_eq(dl_sgemm_blocks(M, N, K), 2);
	ck_assert_int_eq(dl_sgemm_blocks(M, N, K - 1), 1);   /* below the line */
	int if_false = 0, team_of_one = 0, team_of_two = 0;
#pragma omp parallel if (0)
	if_false = dl_sgemm_blocks(M, N, K);
#pragma omp parallel num_threads(1)
	team_of_one = dl_sgemm_blocks(M, N, K);
#pragma omp parallel num_threads(2) reduction(max: team_of_two)
	team_of_two = dl_sgemm_blocks(M, N, K);
	ck_assert_msg(if_false == 1, "inside an inactive region (if false): %d blocks", if_false);
	ck_assert_msg(team_of_one == 1, "inside a team of one: %d blocks", team_of_one);
	ck_assert_msg(team_of_two == 1, "inside a team of two: %d blocks", team_of_two);
	dl_sgemm_whole(1);
	ck_assert_int_eq(dl_sgemm_blocks(M, N, K), 1);
	dl_sgemm_whole(0);
#endif
	dl_set_threads(keep);
}
END_TEST

/* A naive reference in double: a convolution's output y [N, OC, OH, OW]
 * from x [N, C, H, W], w [OC, C/G, kh, kw], b; or, transposed, y from x
 * with w [C, OC/G, kh, kw]. Every (output, tap, input) triple is visited
 * by `visit`, which the forward and the two gradients share. */
struct ref {
	int64_t N, C, H, W, OC, OH, OW, G, kh, kw, sh, sw, ph, pw, dh, dw;
	int transposed;
};

enum { REF_Y, REF_DX, REF_DW };

static void ref_visit(const struct ref *r, int what, double *out, const float *x,
		      const float *w, const float *dy)
{
	int64_t Cg = r->C / r->G, OCg = r->OC / r->G;
	for (int64_t n = 0; n < r->N; n++)
		for (int64_t c = 0; c < r->C; c++) {
			int64_t gi = c / Cg;
			for (int64_t oo = 0; oo < OCg; oo++) {
				int64_t o = gi * OCg + oo;
				/* the weight of (o, c) for tap (i, j) */
				int64_t wbase = r->transposed ? (c * OCg + oo) * r->kh * r->kw
							      : (o * Cg + c % Cg) * r->kh * r->kw;
				/* cell grid: output cells of a convolution, input
				 * cells of a transposed one */
				int64_t GH = r->transposed ? r->H : r->OH, GW = r->transposed ? r->W : r->OW;
				int64_t IH = r->transposed ? r->OH : r->H, IW = r->transposed ? r->OW : r->W;
				for (int64_t a = 0; a < GH; a++)
					for (int64_t bb = 0; bb < GW; bb++)
						for (int64_t i = 0; i < r->kh; i++)
							for (int64_t j = 0; j < r->kw; j++) {
								int64_t ih = a * r->sh - r->ph + i * r->dh;
								int64_t iw = bb * r->sw - r->pw + j * r->dw;
								if (ih < 0 || ih >= IH || iw < 0 || iw >= IW)
									continue;
								/* conv: y[o, a, bb], x[c, ih, iw];
								 * transposed: x[c, a, bb], y[o, ih, iw] */
								int64_t yi, xi;
								if (r->transposed) {
									yi = ((n * r->OC + o) * r->OH + ih) * r->OW + iw;
									xi = ((n * r->C + c) * r->H + a) * r->W + bb;
								} else {
									yi = ((n * r->OC + o) * r->OH + a) * r->OW + bb;
									xi = ((n * r->C + c) * r->H + ih) * r->W + iw;
								}
								int64_t wi = wbase + i * r->kw + j;
								if (what == REF_Y)
									out[yi] += (double)w[wi] * x[xi];
								else if (what == REF_DX)
									out[xi] += (double)w[wi] * dy[yi];
								else
									out[wi] += (double)dy[yi] * x[xi];
							}
			}
		}
}

static double rel_err_d(const float *a, const double *b, int64_t n)
{
	double num = 0.0, den = 0.0;
	for (int64_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);
		num = d > num || isnan(d) ? d : num;
		den = fabs(b[i]) > den ? fabs(b[i]) : den;
	}
	return den > 0 ? num / den : num;
}

/* One layer of op {hps} on input in (padding ph, pw; seed) at `threads`
 * threads, forward and backward against the naive float64 reference;
 * group: what the backward's rule must say for it (dl_conv_backward_group:
 * -1, anything) */
struct ref_case {
	const char *op, *hps;
	int64_t in[4], ph, pw;
};

static void check_reference(const struct ref_case *t, uint64_t seed, int threads,
			    int64_t group)
{
	struct harness h;
	dl_set_threads(threads);
	h_open(&h, t->op, t->hps, 4, t->in, 1);
	if (group >= 0)
		ck_assert_msg(dl_conv_backward_group(&h.n, &h.xs) == group,
			      "%s {%s} %lld x %lld x %lld, %d threads: the backward takes %lld images a GEMM, not %lld",
			      t->op, t->hps, (long long)t->in[0], (long long)t->in[2],
			      (long long)t->in[3], threads,
			      (long long)dl_conv_backward_group(&h.n, &h.xs), (long long)group);
	h_fill(&h, seed, 1);
	h_forward(&h);
	h_backward(&h);
	struct dl_param *w = h_param(&h, "weight"), *b = h_param(&h, "bias");
	int tr = t->op[4] == '_';
	struct ref rf = {h.xs.d[0], h.xs.d[1], h.xs.d[2], h.xs.d[3], h.ys.d[1],
			 h.ys.d[2], h.ys.d[3], 1, w->shape.d[2], w->shape.d[3],
			 1, 1, t->ph, t->pw, 1, 1, tr};
	/* the strides, dilation and groups of the hyperparameters */
	if (strstr(t->hps, "stride: 2"))
		rf.sh = rf.sw = 2;
	if (strstr(t->hps, "stride: [2, 1]"))
		rf.sh = 2;
	if (strstr(t->hps, "dilation: [1, 2]"))
		rf.dw = 2;
	if (strstr(t->hps, "groups: 2"))
		rf.G = 2;
	int64_t nw = dl_shape_numel(&w->shape);
	double *y = calloc((size_t)h.ny, sizeof(double));
	double *dx = calloc((size_t)h.nx, sizeof(double));
	double *dw = calloc((size_t)nw, sizeof(double));
	double *db = calloc((size_t)rf.OC, sizeof(double));
	ref_visit(&rf, REF_Y, y, h.x, w->data, NULL);
	for (int64_t i = 0; i < h.ny; i++) {
		int64_t o = i / (rf.OH * rf.OW) % rf.OC;
		y[i] += b->data[o];
		db[o] += h.gy[i];
	}
	ref_visit(&rf, REF_DX, dx, NULL, w->data, h.gy);
	ref_visit(&rf, REF_DW, dw, h.x, NULL, h.gy);
	ck_assert_msg(rel_err_d(h.y, y, h.ny) < 1e-5, "%s {%s}, %d threads: y off by %g",
		      t->op, t->hps, threads, rel_err_d(h.y, y, h.ny));
	ck_assert_msg(rel_err_d(h.dx, dx, h.nx) < 1e-5, "%s {%s}, %d threads: dx off by %g",
		      t->op, t->hps, threads, rel_err_d(h.dx, dx, h.nx));
	ck_assert_msg(rel_err_d(w->grad, dw, nw) < 1e-5, "%s {%s}, %d threads: dw off by %g",
		      t->op, t->hps, threads, rel_err_d(w->grad, dw, nw));
	ck_assert_msg(rel_err_d(b->grad, db, rf.OC) < 1e-5, "%s: db", t->op);
	free(y);
	free(dx);
	free(dw);
	free(db);
	h_free(&h);
}

/* Layers large enough that im2col runs over several row tiles (forward,
 * and backward's tile-by-tile col2im), Winograd over several blocks and
 * the transposed convolution over several input tiles; 1 and 2 threads;
 * against the naive reference. */
START_TEST(test_conv_large_reference)
{
	static const struct ref_case t[] = {
		{"conv2d", "out_channels: 8, kernel_size: 3, padding: [[1, 2], [0, 1]]",
		 {2, 48, 38, 37}, 1, 0},
		{"conv2d", "out_channels: 32, kernel_size: 3, padding: 1", {2, 32, 40, 39}, 1, 1},
		{"conv2d", "out_channels: 6, kernel_size: [5, 3], stride: [2, 1], dilation: [1, 2], groups: 2, padding: 2",
		 {3, 64, 33, 30}, 2, 2},
		{"conv_transpose2d", "out_channels: 48, kernel_size: 3, stride: 2, padding: 1",
		 {2, 8, 30, 20}, 1, 1},
		/* Winograd forward with groups, Cg != OCg, and padding 2
		 * and 0; a strided layer whose images each fit a tile */
		{"conv2d", "out_channels: 32, kernel_size: 3, padding: 2, groups: 2",
		 {2, 32, 21, 19}, 2, 2},
		{"conv2d", "out_channels: 16, kernel_size: 3", {3, 24, 20, 22}, 0, 0},
		{"conv2d", "out_channels: 96, kernel_size: 3, padding: 1, groups: 2",
		 {2, 64, 17, 15}, 1, 1},
		{"conv2d", "out_channels: 20, kernel_size: 3, stride: 2, padding: 1",
		 {5, 12, 15, 13}, 1, 1},
	};
	int keep = dl_threads();
	for (size_t k = 0; k < sizeof t / sizeof *t; k++)
		for (int threads = 1; threads <= 2; threads++)
			check_reference(&t[k], 99 + k, threads, -1);
	dl_set_threads(keep);
}
END_TEST

/* im2col's rows at every width from 1 to 42 floats (conv.c's copy_row
 * and zero_row: one vector, two, three, four, a library call, and the
 * short tails): "same" rows (the shifted copy, padding columns zeroed;
 * in the backward, col2im's runs) and valid rows (row by row), forward
 * and backward against the float64 reference. */
START_TEST(test_im2col_row_widths)
{
	int keep = dl_threads();
	for (int64_t W = 1; W <= 42; W++) {
		struct ref_case same = {"conv2d", "out_channels: 3, kernel_size: [3, 5], padding: [1, 2]",
					{2, 3, 4, W}, 1, 2};
		check_reference(&same, 500 + W, 1, -1);
		if (W >= 3) {
			struct ref_case valid = {"conv2d", "out_channels: 2, kernel_size: [2, 3]",
						 {2, 3, 5, W}, 0, 0};
			check_reference(&valid, 600 + W, 1, -1);
		}
	}
	/* 140 rows: the taps at dj = +-2 wrap 278 cells, more than
	 * col2im_shift keeps aside, and go row by row; those at +-1 and 0
	 * take the run */
	struct ref_case tall = {"conv2d", "out_channels: 2, kernel_size: [3, 5], padding: [1, 2]",
				{1, 2, 140, 9}, 1, 2};
	check_reference(&tall, 700, 1, -1);
	dl_set_threads(keep);
}
END_TEST

/* The backward at planes under 64 cells in groups of images (src/ops/conv.c
 * bwd_group): pointwise and 3x3 layers, with groups, stride 2 and a last
 * group of fewer images (the group follows the scratch of every thread,
 * so it differs at 1 and 2 threads), and layers the rule leaves per
 * image (a plane of 64 cells, batch 1, a transposed layer); against the
 * float64 reference. */
START_TEST(test_conv_backward_groups)
{
	static const struct {
		struct ref_case c;
		int64_t group[2];   /* images a GEMM at 1 and 2 threads */
	} t[] = {
		{{"conv2d", "out_channels: 48, kernel_size: 1", {33, 64, 2, 2}, 0, 0}, {6, 13}},
		{{"conv2d", "out_channels: 36, kernel_size: 1, groups: 2", {7, 40, 3, 5}, 0, 0}, {0, 2}},
		{{"conv2d", "out_channels: 40, kernel_size: 3, padding: 1", {21, 24, 4, 4}, 1, 1}, {12, 16}},
		{{"conv2d", "out_channels: 64, kernel_size: 3, padding: 1, groups: 2", {9, 64, 3, 5}, 1, 1}, {9, 9}},
		{{"conv2d", "out_channels: 48, kernel_size: 3, stride: 2, padding: 1", {6, 40, 9, 7}, 1, 1}, {3, 6}},
		{{"conv2d", "out_channels: 8, kernel_size: 3, padding: 1", {3, 8, 8, 8}, 1, 1}, {0, 0}},
		{{"conv2d", "out_channels: 8, kernel_size: 3, padding: 1", {1, 8, 4, 4}, 1, 1}, {0, 0}},
		{{"conv_transpose2d", "out_channels: 8, kernel_size: 3, stride: 2, padding: 1", {4, 8, 3, 3}, 1, 1}, {0, 0}},
	};
	int keep = dl_threads();
	for (size_t k = 0; k < sizeof t / sizeof *t; k++)
		for (int threads = 1; threads <= 2; threads++)
			check_reference(&t[k].c, 300 + k, threads, t[k].group[threads - 1]);
	dl_set_threads(keep);
}
END_TEST

/* A layer's input, weight and dy from seed, forward and backward with
 * `threads` asked for and `used` running; its dx and dW copied out */
static void rows_run(const struct ref_case *c, uint64_t seed, int threads, int used,
		     int twice, float **dx, float **dw, int64_t *nx, int64_t *nw)
{
	struct harness h;
	dl_set_threads(threads);
	dl_threads_pin(used);
	h_open(&h, c->op, c->hps, 4, c->in, 1);
	h_fill(&h, seed, 1);
	h_forward(&h);
	h_backward(&h);
	if (twice) {
		struct dl_tensor in = {h.xs, h.x}, out = {h.ys, h.y};
		float *din[1] = {h.dx};
		h.n.op->backward(&h.n, &in, &out, h.gy, din, &h.ctx);
	}
	struct dl_param *w = h_param(&h, "weight");
	*nx = h.nx;
	*nw = dl_shape_numel(&w->shape);
	*dx = malloc((size_t)*nx * sizeof(float));
	*dw = malloc((size_t)*nw * sizeof(float));
	memcpy(*dx, h.dx, (size_t)*nx * sizeof(float));
	memcpy(*dw, w->grad, (size_t)*nw * sizeof(float));
	h_free(&h);
}

/* The backward's products on dl_sgemm_rows (src/ops/conv.c,
 * bwd_xtra_floats) and on OpenBLAS, both where the AVX-512 kernels run:
 * per image (a strided 3x3 layer over several tiles of columns, a
 * pointwise layer on 300 cells: two packed chunks of dy, a 7x7 layer at
 * batch 1, groups of 24 output channels) and in groups of images
 * (bwd_group: a 3x3 layer on 4x4 planes, its data gradient by the
 * Winograd adjoint; a strided 3x3 layer on 5x4 outputs and a pointwise
 * one on 2x2, their data gradients from W^T; pointwise with groups), and
 * a layer of 8 output channels, which stays on OpenBLAS; 1 and 2
 * threads, against the float64 reference. On dl_sgemm_rows: two threads
 * asked for give the same bits with one or two running; the grouped
 * backward's dx the same bits at 1 and 2 threads (each element one chain
 * over the output channels; dW's sums follow the groups, which follow
 * the thread count); a second backward without zeroing doubles dx and dW
 * (within 1e-6 of the largest: the second adds its sums on). */
START_TEST(test_conv_backward_rows)
{
	static const struct {
		struct ref_case c;
		int rows, grouped;
	} t[] = {
		{{"conv2d", "out_channels: 40, kernel_size: 3, stride: 2, padding: 1",
		  {2, 17, 29, 31}, 1, 1}, 1, 0},
		{{"conv2d", "out_channels: 35, kernel_size: 1", {2, 19, 15, 20}, 0, 0}, 1, 0},
		{{"conv2d", "out_channels: 36, kernel_size: 7, stride: 2, padding: 3",
		  {1, 3, 45, 39}, 3, 3}, 1, 0},
		{{"conv2d", "out_channels: 48, kernel_size: 3, stride: 2, padding: 1, groups: 2",
		  {3, 16, 20, 18}, 1, 1}, 1, 0},
		{{"conv2d", "out_channels: 40, kernel_size: 3, padding: 1", {21, 24, 4, 4}, 1, 1}, 1, 1},
		{{"conv2d", "out_channels: 48, kernel_size: 3, stride: 2, padding: 1",
		  {6, 40, 9, 7}, 1, 1}, 1, 1},
		{{"conv2d", "out_channels: 48, kernel_size: 1", {33, 64, 2, 2}, 0, 0}, 1, 1},
		{{"conv2d", "out_channels: 36, kernel_size: 1, groups: 2", {7, 40, 3, 5}, 0, 0}, 1, 0},
		{{"conv2d", "out_channels: 8, kernel_size: 3, padding: 1", {3, 8, 8, 8}, 1, 1}, 0, 0},
	};
	int keep = dl_threads();
	for (size_t k = 0; k < sizeof t / sizeof *t; k++)
		for (int wide = 0; wide < 2; wide++) {
			if (dl_sgemm_rows_wide_set(wide) != wide)
				continue;
			for (int threads = 1; threads <= 2; threads++) {
				struct harness h;
				dl_set_threads(threads);
				h_open(&h, t[k].c.op, t[k].c.hps, 4, t[k].c.in, 1);
				int rows = dl_conv_backward_rows(&h.n, &h.xs);
				ck_assert_msg(rows == (wide && t[k].rows),
					      "{%s}, %d threads, wide %d: on dl_sgemm_rows %d",
					      t[k].c.hps, threads, wide, rows);
				h_free(&h);
				check_reference(&t[k].c, 1100 + k, threads, -1);
			}
			if (!wide || !t[k].rows)
				continue;
			float *dx[4], *dw[4];
			int64_t nx, nw;
			rows_run(&t[k].c, 1200 + k, 2, 2, 0, &dx[0], &dw[0], &nx, &nw);
			rows_run(&t[k].c, 1200 + k, 2, 1, 0, &dx[1], &dw[1], &nx, &nw);
			rows_run(&t[k].c, 1200 + k, 1, 1, 0, &dx[2], &dw[2], &nx, &nw);
			rows_run(&t[k].c, 1200 + k, 2, 2, 1, &dx[3], &dw[3], &nx, &nw);
			ck_assert_msg(memcmp(dx[0], dx[1], (size_t)nx * sizeof(float)) == 0 &&
				      memcmp(dw[0], dw[1], (size_t)nw * sizeof(float)) == 0,
				      "{%s}: one thread of two running changed the bits", t[k].c.hps);
			if (t[k].grouped)
				ck_assert_msg(memcmp(dx[0], dx[2], (size_t)nx * sizeof(float)) == 0,
					      "{%s}: grouped, dx differs at 1 and 2 threads", t[k].c.hps);
			float big = 0.0f, bigw = 0.0f;
			for (int64_t i = 0; i < nx; i++)
				big = fabsf(dx[0][i]) > big ? fabsf(dx[0][i]) : big;
			for (int64_t i = 0; i < nw; i++)
				bigw = fabsf(dw[0][i]) > bigw ? fabsf(dw[0][i]) : bigw;
			for (int64_t i = 0; i < nx; i++)
				ck_assert_msg(fabsf(dx[3][i] - 2.0f * dx[0][i]) <= 1e-6f * big,
					      "{%s}: dx[%lld] %g after two backward passes, not 2 x %g",
					      t[k].c.hps, (long long)i, dx[3][i], dx[0][i]);
			for (int64_t i = 0; i < nw; i++)
				ck_assert_msg(fabsf(dw[3][i] - 2.0f * dw[0][i]) <= 1e-6f * bigw,
					      "{%s}: dW[%lld] %g after two backward passes, not 2 x %g",
					      t[k].c.hps, (long long)i, dw[3][i], dw[0][i]);
			for (int i = 0; i < 4; i++) {
				free(dx[i]);
				free(dw[i]);
			}
		}
	dl_sgemm_rows_wide_set(-1);
	dl_set_threads(keep);
}
END_TEST

/* The data gradient of 3x3 layers with unit stride as a Winograd
 * convolution of dy (src/ops/conv.c, adjoint_of): F(4x4) and F(2x2)
 * adjoints, groups with Cg != OCg, padding 0, 2 and uneven (the
 * adjoint's 2, 0 and uneven), odd sizes, batch 1 and 3, at 1 and 2
 * threads, against the float64 reference; the rule's answer, and for
 * layers it leaves to the GEMM and col2im (stride 2, dilation, 5x5,
 * padding 3, fewer than 16 channels) 0. And the gradient adds to dx: a
 * second backward without zeroing gives twice the first (exactly, for
 * the adjoint). */
START_TEST(test_conv_backward_adjoint)
{
	static const struct {
		struct ref_case c;
		int winograd;   /* whether the rule takes the adjoint */
	} t[] = {
		{{"conv2d", "out_channels: 32, kernel_size: 3, padding: 1", {3, 32, 9, 11}, 1, 1}, 1},
		{{"conv2d", "out_channels: 16, kernel_size: 3, padding: 1", {2, 16, 6, 5}, 1, 1}, 1},
		{{"conv2d", "out_channels: 16, kernel_size: 3, padding: 1", {1, 24, 13, 10}, 1, 1}, 1},
		{{"conv2d", "out_channels: 64, kernel_size: 3, padding: 1, groups: 2", {2, 32, 10, 7}, 1, 1}, 1},
		{{"conv2d", "out_channels: 20, kernel_size: 3", {2, 17, 12, 9}, 0, 0}, 1},
		{{"conv2d", "out_channels: 18, kernel_size: 3, padding: 2", {3, 16, 7, 8}, 2, 2}, 1},
		{{"conv2d", "out_channels: 16, kernel_size: 3, padding: [[1, 2], [0, 1]]", {2, 16, 9, 12}, 1, 0}, 1},
		{{"conv2d", "out_channels: 16, kernel_size: 3, padding: 3", {2, 16, 8, 8}, 3, 3}, 0},
		{{"conv2d", "out_channels: 16, kernel_size: 3, stride: 2, padding: 1", {2, 16, 12, 12}, 1, 1}, 0},
		{{"conv2d", "out_channels: 16, kernel_size: 5, padding: 2", {2, 16, 9, 9}, 2, 2}, 0},
		{{"conv2d", "out_channels: 8, kernel_size: 3, padding: 1", {2, 16, 12, 12}, 1, 1}, 0},
	};
	int keep = dl_threads();
	for (size_t k = 0; k < sizeof t / sizeof *t; k++)
		for (int threads = 1; threads <= 2; threads++) {
			check_reference(&t[k].c, 800 + k, threads, -1);
			struct harness h;
			h_open(&h, t[k].c.op, t[k].c.hps, 4, t[k].c.in, 1);
			int nta = dl_conv_backward_adjoint(&h.n, &h.xs);
			ck_assert_msg(t[k].winograd ? nta >= 1 : nta == 0,
				      "{%s}, %d threads: the adjoint runs on %d threads",
				      t[k].c.hps, threads, nta);
			h_fill(&h, 900 + k, 1);
			h_forward(&h);
			h_backward(&h);
			float *once = malloc((size_t)h.nx * sizeof(float));
			memcpy(once, h.dx, (size_t)h.nx * sizeof(float));
			struct dl_tensor in = {h.xs, h.x}, out = {h.ys, h.y};
			float *din[1] = {h.dx};
			h.n.op->backward(&h.n, &in, &out, h.gy, din, &h.ctx);
			/* the adjoint adds each finished sum: exactly twice;
			 * col2im adds tap by tap */
			float big = 0.0f;
			for (int64_t i = 0; i < h.nx; i++)
				big = fabsf(once[i]) > big ? fabsf(once[i]) : big;
			float tol = nta ? 0.0f : 1e-6f * big;
			for (int64_t i = 0; i < h.nx; i++)
				ck_assert_msg(fabsf(h.dx[i] - 2.0f * once[i]) <= tol,
					      "{%s}, %d threads: dx[%lld] %g after two backward passes, not 2 x %g",
					      t[k].c.hps, threads, (long long)i, h.dx[i], once[i]);
			free(once);
			h_free(&h);
		}
	dl_set_threads(keep);
}
END_TEST

/* Output planes of at most DL_SKINNY_N cells, whose forward multiplies
 * as dot products (dl_sgemm_skinny) on transposed columns: batch 1 (the
 * threads sharing the unit at 2) and 3, stride 2, groups, an odd channel
 * count, pointwise layers at batch 1 (3x3, 2x2 with groups, 1x1);
 * against the float64 reference. */
START_TEST(test_conv_skinny)
{
	static const struct ref_case t[] = {
		{"conv2d", "out_channels: 40, kernel_size: 3, padding: 1", {1, 24, 2, 2}, 1, 1},
		{"conv2d", "out_channels: 33, kernel_size: 3, stride: 2, padding: 1", {3, 20, 5, 6}, 1, 1},
		{"conv2d", "out_channels: 16, kernel_size: 3, padding: 1, groups: 2", {2, 8, 1, 3}, 1, 1},
		/* pointwise at batch 1, reading the input in place */
		{"conv2d", "out_channels: 24, kernel_size: 1", {1, 40, 3, 3}, 0, 0},
		{"conv2d", "out_channels: 10, kernel_size: 1, groups: 2", {1, 12, 2, 2}, 0, 0},
		{"conv2d", "out_channels: 30, kernel_size: 1", {1, 17, 1, 1}, 0, 0},
	};
	int keep = dl_threads();
	for (size_t k = 0; k < sizeof t / sizeof *t; k++)
		for (int threads = 1; threads <= 2; threads++)
			check_reference(&t[k], 400 + k, threads, -1);
	dl_set_threads(keep);
}
END_TEST

/* h set up for op {hps} (conv1d or conv2d) on input in (in[3] unused
 * for conv1d) at the given threads; returns whether the layer is 1-d */
static int h_case(struct harness *h, const char *op, const char *hps, const int64_t *in,
		  int train, int threads)
{
	struct dl_error err = {0};
	dl_set_threads(threads);
	int oned = op[4] == '1';
	struct dl_shape xs = dl_shape_make(oned ? 3 : 4, in);
	ck_assert_msg(h_setup(h, op, hps, &xs, train, &err) == 0, "%s", err.msg);
	return oned;
}

/* Depthwise layers that the channel-blocked forward serves (src/ops/conv.c
 * dw_cb: blocks of at most DW_CB_MAX_FLOATS) at odd sizes: channel counts that leave a partial block of lanes, a channel
 * multiplier, strides 1 and 2, kernels 3, 5 and 3x5 with dilation,
 * padding that is not "same" and differs before and after, planes
 * smaller than the kernel, planes of several strips, conv1d; batch 1
 * and > 1, 1 and 2 threads; and rows too long for it.
 * Against the float64 reference: the plain forward (and backward, which
 * the row-wise kernels run), then the forward with a fused epilogue as
 * the fusion pass sets it (engine/fuse.h): bias, folded batch norm and
 * silu in the lanes, and bias, relu6, residual and relu after the
 * transpose. */
START_TEST(test_depthwise_blocked)
{
	struct {
		const char *op, *hps;
		int64_t in[4], sh, sw, ph, pw, dh, dw;
	} t[] = {
		{"conv2d", "out_channels: 19, kernel_size: 3, padding: 1, groups: 19",
		 {3, 19, 13, 17}, 1, 1, 1, 1, 1, 1},
		{"conv2d", "out_channels: 42, kernel_size: 5, stride: 2, padding: 2, groups: 21",
		 {1, 21, 7, 13}, 2, 2, 2, 2, 1, 1},
		{"conv2d", "out_channels: 17, kernel_size: 3, stride: 2, padding: [[0, 1], [1, 0]], groups: 17",
		 {2, 17, 17, 7}, 2, 2, 0, 1, 1, 1},
		{"conv2d", "out_channels: 16, kernel_size: 5, padding: 2, groups: 16",
		 {5, 16, 2, 2}, 1, 1, 2, 2, 1, 1},
		{"conv2d", "out_channels: 33, kernel_size: 5, padding: 1, groups: 33",
		 {2, 33, 3, 4}, 1, 1, 1, 1, 1, 1},
		{"conv2d", "out_channels: 18, kernel_size: [3, 5], dilation: [2, 1], padding: [[2, 1], [1, 3]], groups: 18",
		 {2, 18, 9, 9}, 1, 1, 2, 1, 2, 1},
		{"conv2d", "out_channels: 20, kernel_size: 3, stride: 2, padding: 1, groups: 20",
		 {1, 20, 45, 41}, 2, 2, 1, 1, 1, 1},
		{"conv2d", "out_channels: 7, kernel_size: 5, padding: 2, groups: 7",
		 {3, 7, 31, 29}, 1, 1, 2, 2, 1, 1},
		{"conv1d", "out_channels: 20, kernel_size: 11, stride: 2, padding: [[4, 6]], groups: 20",
		 {3, 20, 37, 0}, 1, 2, 0, 4, 1, 1},
		/* planes that take several strips of rows (dw_cb_rows) */
		{"conv2d", "out_channels: 3, kernel_size: 3, padding: 1, groups: 3",
		 {1, 3, 130, 130}, 1, 1, 1, 1, 1, 1},
		{"conv2d", "out_channels: 2, kernel_size: 5, stride: 2, padding: 2, groups: 2",
		 {2, 2, 181, 181}, 2, 2, 2, 2, 1, 1},
		/* rows too long for a block of DW_CB_MAX_FLOATS: the
		 * row-wise kernel */
		{"conv1d", "out_channels: 2, kernel_size: 3, padding: 1, groups: 2",
		 {1, 2, 40000, 0}, 1, 1, 0, 1, 1, 1},
	};
	int keep = dl_threads();
	for (size_t k = 0; k < sizeof t / sizeof *t; k++)
		for (int threads = 1; threads <= 2; threads++) {
			struct harness h;
			int oned = h_case(&h, t[k].op, t[k].hps, t[k].in, 1, threads);
			struct dl_rng r;
			dl_rng_seed(&r, 7 + k);
			for (int64_t i = 0; i < h.nx; i++)
				h.x[i] = (float)dl_rng_uniform(&r) - 0.5f;
			for (int64_t i = 0; i < h.ny; i++)
				h.gy[i] = (float)dl_rng_uniform(&r) - 0.5f;
			for (int i = 0; i < h.n.n_params; i++)
				for (int64_t j = 0; j < dl_shape_numel(&h.n.params[i].shape); j++)
					h.n.params[i].data[j] = (float)dl_rng_uniform(&r) - 0.5f;
			h_forward(&h);
			h_backward(&h);
			struct dl_param *w = h_param(&h, "weight"), *b = h_param(&h, "bias");
			int64_t H = oned ? 1 : h.xs.d[2], W = h.xs.d[oned ? 2 : 3];
			int64_t OH = oned ? 1 : h.ys.d[2], OW = h.ys.d[oned ? 2 : 3];
			struct ref rf = {h.xs.d[0], h.xs.d[1], H, W, h.ys.d[1], OH, OW,
					 h.xs.d[1], oned ? 1 : w->shape.d[2], w->shape.d[oned ? 2 : 3],
					 t[k].sh, t[k].sw, t[k].ph, t[k].pw, t[k].dh, t[k].dw, 0};
			int64_t nw = dl_shape_numel(&w->shape), plane = OH * OW;
			double *y = calloc((size_t)h.ny, sizeof(double));
			double *dx = calloc((size_t)h.nx, sizeof(double));
			double *dw = calloc((size_t)nw, sizeof(double));
			ref_visit(&rf, REF_Y, y, h.x, w->data, NULL);
			ref_visit(&rf, REF_DX, dx, NULL, w->data, h.gy);
			ref_visit(&rf, REF_DW, dw, h.x, NULL, h.gy);
			double *yb = calloc((size_t)h.ny, sizeof(double));
			for (int64_t i = 0; i < h.ny; i++)
				yb[i] = y[i] + b->data[i / plane % rf.OC];
			ck_assert_msg(rel_err_d(h.y, yb, h.ny) < 1e-5, "{%s}, %d threads: y off by %g",
				      t[k].hps, threads, rel_err_d(h.y, yb, h.ny));
			ck_assert_msg(rel_err_d(h.dx, dx, h.nx) < 1e-5, "{%s}, %d threads: dx off by %g",
				      t[k].hps, threads, rel_err_d(h.dx, dx, h.nx));
			ck_assert_msg(rel_err_d(w->grad, dw, nw) < 1e-5, "{%s}, %d threads: dw off by %g",
				      t[k].hps, threads, rel_err_d(w->grad, dw, nw));

			/* fused epilogues, at inference */
			float *sc = malloc((size_t)(2 * rf.OC) * sizeof(float));
			float *res = malloc((size_t)h.ny * sizeof(float));
			for (int64_t c = 0; c < rf.OC; c++) {
				sc[c] = 0.5f + (float)dl_rng_uniform(&r);
				sc[rf.OC + c] = (float)dl_rng_uniform(&r) - 0.5f;
			}
			for (int64_t i = 0; i < h.ny; i++)
				res[i] = 2.0f * (float)dl_rng_uniform(&r) - 1.0f;
			struct dl_epilogue e = {.bn = -1, .act1 = DL_ACT_SILU, .res = -1, .ready = 1,
						.bias = b->data, .scale = sc, .shift = sc + rf.OC};
			h.n.epi = &e;
			h.ctx.train = 0;
			h_forward(&h);
			for (int64_t i = 0; i < h.ny; i++) {
				int64_t c = i / plane % rf.OC;
				double v = (y[i] + b->data[c]) * sc[c] + sc[rf.OC + c];
				yb[i] = v / (1.0 + exp(-v));
			}
			ck_assert_msg(rel_err_d(h.y, yb, h.ny) < 1e-5,
				      "{%s}, %d threads: bias, batch norm, silu off by %g",
				      t[k].hps, threads, rel_err_d(h.y, yb, h.ny));
			struct dl_epilogue e2 = {.bn = -1, .act1 = DL_ACT_RELU6, .act2 = DL_ACT_RELU,
						 .res = 0, .ready = 1, .bias = b->data, .resp = res};
			h.n.epi = &e2;
			h_forward(&h);
			for (int64_t i = 0; i < h.ny; i++) {
				double v = y[i] + b->data[i / plane % rf.OC];
				v = v < 0.0 ? 0.0 : v > 6.0 ? 6.0 : v;
				v += res[i];
				yb[i] = v < 0.0 ? 0.0 : v;
			}
			ck_assert_msg(rel_err_d(h.y, yb, h.ny) < 1e-5,
				      "{%s}, %d threads: bias, relu6, residual, relu off by %g",
				      t[k].hps, threads, rel_err_d(h.y, yb, h.ny));
			h.n.epi = NULL;
			free(sc);
			free(res);
			free(y);
			free(yb);
			free(dx);
			free(dw);
			h_free(&h);
		}
	dl_set_threads(keep);
}
END_TEST

/* The first run's output kept in *first, a later run's compared with it
 * bit for bit (what: the case) */
static void same_bits(float **first, const float *y, int64_t n, const char *what)
{
	if (!*first) {
		*first = malloc((size_t)n * sizeof(float));
		memcpy(*first, y, (size_t)n * sizeof(float));
		return;
	}
	ck_assert_msg(memcmp(*first, y, (size_t)n * sizeof(float)) == 0,
		      "{%s}: 2 threads changed the bits", what);
}

/* Products of many columns on dl_sgemm_rows (conv.c rows_chunk: a CPU
 * with 512-bit FMA units) in chunks of at most OC columns rounded down to
 * panels, and the same layers on OpenBLAS: a 7x7 stride-2 layer of 36
 * output channels (chunks of 32), a stride-2 3x3 layer, a dilated grouped
 * 3x3 layer (no Winograd), a pointwise layer on 143 cells at batch 1 and
 * 3 (the input read in place), a conv1d; 1 and 2 threads (batch 1 shares
 * each unit among them); against the float64 reference, plain and with
 * a fused bias, relu6, residual and relu. On dl_sgemm_rows the output
 * has the same bits at 1 and 2 threads. */
START_TEST(test_conv_wide_rows)
{
	struct {
		const char *op, *hps;
		int64_t in[4], sh, sw, ph, pw, dh, dw, G;
	} t[] = {
		{"conv2d", "out_channels: 36, kernel_size: 7, stride: 2, padding: 3",
		 {1, 3, 45, 39}, 2, 2, 3, 3, 1, 1, 1},
		{"conv2d", "out_channels: 40, kernel_size: 3, stride: 2, padding: 1",
		 {2, 17, 29, 31}, 2, 2, 1, 1, 1, 1, 1},
		{"conv2d", "out_channels: 48, kernel_size: 3, padding: 2, dilation: 2, groups: 2",
		 {1, 8, 20, 23}, 1, 1, 2, 2, 2, 2, 2},
		{"conv2d", "out_channels: 35, kernel_size: 1", {1, 19, 13, 11}, 1, 1, 0, 0, 1, 1, 1},
		{"conv2d", "out_channels: 35, kernel_size: 1", {3, 19, 13, 11}, 1, 1, 0, 0, 1, 1, 1},
		{"conv1d", "out_channels: 33, kernel_size: 5, padding: 2", {2, 6, 300, 0},
		 1, 1, 0, 2, 1, 1, 1},
	};
	int keep = dl_threads();
	for (size_t k = 0; k < sizeof t / sizeof *t; k++)
		for (int wide = 0; wide < 2; wide++) {
			if (dl_sgemm_rows_wide_set(wide) != wide)
				continue;
			float *y1 = NULL;
			for (int threads = 1; threads <= 2; threads++) {
				struct harness h;
				int oned = h_case(&h, t[k].op, t[k].hps, t[k].in, 0, threads);
				h.ctx.fixed_weights = 1;
				h_fill(&h, 31 + k, 0);
				struct dl_param *w = h_param(&h, "weight"), *b = h_param(&h, "bias");
				int64_t H = oned ? 1 : h.xs.d[2], W = h.xs.d[oned ? 2 : 3];
				int64_t OH = oned ? 1 : h.ys.d[2], OW = h.ys.d[oned ? 2 : 3];
				struct ref rf = {h.xs.d[0], h.xs.d[1], H, W, h.ys.d[1], OH, OW,
						 t[k].G, oned ? 1 : w->shape.d[2],
						 w->shape.d[oned ? 2 : 3], t[k].sh, t[k].sw, t[k].ph,
						 t[k].pw, t[k].dh, t[k].dw, 0};
				int64_t plane = OH * OW;
				double *y = calloc((size_t)h.ny, sizeof(double));
				double *yb = calloc((size_t)h.ny, sizeof(double));
				float *res = malloc((size_t)h.ny * sizeof(float));
				ref_visit(&rf, REF_Y, y, h.x, w->data, NULL);
				h_forward(&h);
				for (int64_t i = 0; i < h.ny; i++)
					yb[i] = y[i] + b->data[i / plane % rf.OC];
				ck_assert_msg(rel_err_d(h.y, yb, h.ny) < 1e-5,
					      "{%s} %s, %d threads: y off by %g", t[k].hps,
					      wide ? "rows" : "OpenBLAS", threads,
					      rel_err_d(h.y, yb, h.ny));
				if (wide)
					same_bits(&y1, h.y, h.ny, t[k].hps);
				for (int64_t i = 0; i < h.ny; i++)
					res[i] = (float)(i % 7) * 0.25f - 0.75f;
				struct dl_epilogue e = {.bn = -1, .act1 = DL_ACT_RELU6, .act2 = DL_ACT_RELU,
							.res = 0, .ready = 1, .bias = b->data, .resp = res};
				h.n.epi = &e;
				h_forward(&h);
				for (int64_t i = 0; i < h.ny; i++) {
					double v = yb[i];
					v = v < 0.0 ? 0.0 : v > 6.0 ? 6.0 : v;
					v += res[i];
					yb[i] = v < 0.0 ? 0.0 : v;
				}
				ck_assert_msg(rel_err_d(h.y, yb, h.ny) < 1e-5,
					      "{%s} %s, %d threads: bias, relu6, residual, relu off by %g",
					      t[k].hps, wide ? "rows" : "OpenBLAS", threads,
					      rel_err_d(h.y, yb, h.ny));
				h.n.epi = NULL;
				free(res);
				free(y);
				free(yb);
				h_free(&h);
			}
			free(y1);
		}
	dl_sgemm_rows_wide_set(-1);
	dl_set_threads(keep);
}
END_TEST

/* Pointwise layers on small planes at batch > 1 run one GEMM per group
 * of images (src/ops/conv.c pw_forward_batched: gather [C, n HW], GEMM,
 * scatter with bias and epilogue): odd channel counts (enough that a
 * group of 3 to 55 images fits the slot), planes 1x1 to 4x4, batch 1, 3
 * and 33 (groups that do not divide the batch, a part
 * per thread), a group that shrinks to fit dl_sgemm_rows's panels, 1 and
 * 2 threads, on OpenBLAS and (where the AVX-512
 * kernels run) on dl_sgemm_rows, the images packed straight into its
 * panels, the same bits at 1 and 2 threads; against the float64
 * reference, plain and with a fused bias, batch norm, relu6, residual
 * and relu. */
START_TEST(test_pointwise_batched)
{
	/* {C, OC, planes, batches}: 131 -> 97 at four planes; 20 -> 32 at
	 * 1x1 and batch 40, where pw_group's 12 images need 16 columns of
	 * panels (16 x 20) and a 32 x 12 product, 704 floats against the
	 * slot's 640, and dl_sgemm_rows's group shrinks to 10 */
	static const struct {
		int64_t C, OC, np, planes[4][2], nb, batches[3];
	} cf[] = {{131, 97, 4, {{1, 1}, {2, 2}, {3, 5}, {4, 4}}, 3, {1, 3, 33}},
		  {20, 32, 1, {{1, 1}}, 1, {40}}};
	int keep = dl_threads();
	for (int wide = 0; wide < 2; wide++) {
		if (dl_sgemm_rows_wide_set(wide) != wide)
			continue;
		for (size_t ci = 0; ci < sizeof cf / sizeof *cf; ci++)
		for (int pi = 0; pi < cf[ci].np; pi++)
			for (int bi = 0; bi < cf[ci].nb; bi++) {
				const int64_t C = cf[ci].C, OC = cf[ci].OC;
				float *y1 = NULL;
				for (int threads = 1; threads <= 2; threads++) {
					struct harness h;
					struct dl_error err = {0};
					dl_set_threads(threads);
					int64_t d[4] = {cf[ci].batches[bi], C, cf[ci].planes[pi][0],
							 cf[ci].planes[pi][1]};
					struct dl_shape xs = dl_shape_make(4, d);
					char hp[64];
					snprintf(hp, sizeof hp, "out_channels: %lld, kernel_size: 1",
						 (long long)OC);
					ck_assert_msg(h_setup(&h, "conv2d", hp, &xs, 1, &err) == 0, "%s",
						      err.msg);
					struct dl_rng r;
					dl_rng_seed(&r, 31 + pi * 7 + bi);
					for (int64_t i = 0; i < h.nx; i++)
						h.x[i] = (float)dl_rng_uniform(&r) - 0.5f;
					for (int i = 0; i < h.n.n_params; i++)
						for (int64_t j = 0; j < dl_shape_numel(&h.n.params[i].shape); j++)
							h.n.params[i].data[j] = (float)dl_rng_uniform(&r) - 0.5f;
					struct dl_param *w = h_param(&h, "weight"), *b = h_param(&h, "bias");
					int64_t plane = d[2] * d[3];
					struct ref rf = {d[0], C, d[2], d[3], OC, d[2], d[3], 1, 1, 1,
							 1, 1, 0, 0, 1, 1, 0};
					double *y = calloc((size_t)h.ny, sizeof(double));
					double *yb = calloc((size_t)h.ny, sizeof(double));
					ref_visit(&rf, REF_Y, y, h.x, w->data, NULL);
					h_forward(&h);
					for (int64_t i = 0; i < h.ny; i++)
						yb[i] = y[i] + b->data[i / plane % OC];
					ck_assert_msg(rel_err_d(h.y, yb, h.ny) < 1e-5,
						      "%lldx%lld, batch %lld, %d threads, wide %d: y off by %g",
						      (long long)d[2], (long long)d[3], (long long)d[0], threads,
						      wide, rel_err_d(h.y, yb, h.ny));
					/* on dl_sgemm_rows each output is one chain over
					 * the input channels: the same bits at 2 threads */
					if (wide) {
						char what[64];
						snprintf(what, sizeof what, "%lldx%lld, batch %lld",
							 (long long)d[2], (long long)d[3], (long long)d[0]);
						same_bits(&y1, h.y, h.ny, what);
					}

					/* fused: bias, batch norm, relu6, residual, relu */
					float *sc = malloc((size_t)(2 * OC) * sizeof(float));
					float *res = malloc((size_t)h.ny * sizeof(float));
					for (int64_t c = 0; c < OC; c++) {
						sc[c] = 0.5f + (float)dl_rng_uniform(&r);
						sc[OC + c] = (float)dl_rng_uniform(&r) - 0.5f;
					}
					for (int64_t i = 0; i < h.ny; i++)
						res[i] = 2.0f * (float)dl_rng_uniform(&r) - 1.0f;
					struct dl_epilogue e = {.bn = -1, .act1 = DL_ACT_RELU6,
								.act2 = DL_ACT_RELU, .res = 0, .ready = 1,
								.bias = b->data, .scale = sc, .shift = sc + OC,
								.resp = res};
					h.n.epi = &e;
					h.ctx.train = 0;
					h_forward(&h);
					for (int64_t i = 0; i < h.ny; i++) {
						int64_t c = i / plane % OC;
						double v = (y[i] + b->data[c]) * sc[c] + sc[OC + c];
						v = v < 0.0 ? 0.0 : v > 6.0 ? 6.0 : v;
						v += res[i];
						yb[i] = v < 0.0 ? 0.0 : v;
					}
					ck_assert_msg(rel_err_d(h.y, yb, h.ny) < 1e-5,
						      "%lldx%lld, batch %lld, %d threads: fused off by %g",
						      (long long)d[2], (long long)d[3], (long long)d[0], threads,
						      rel_err_d(h.y, yb, h.ny));
					h.n.epi = NULL;
					free(sc);
					free(res);
					free(y);
					free(yb);
					h_free(&h);
				}
				free(y1);
			}
	}
	dl_sgemm_rows_wide_set(-1);
	dl_set_threads(keep);
}
END_TEST

/* Winograd F(4x4, 3x3) at the most input channels its rule admits
 * (WINO4_MAX_C, src/ops/conv.c: 128) on resnet-like data (inputs after
 * batch norm and relu, Kaiming-normal weights), against the float64 sum:
 * within the fixtures' 1e-5 (measured 5.6e-6 at worst by
 * tools/bench/wino_error.py, against 1e-5 at 256 channels). 8x8 outputs
 * at batch 4 take F(4x4); the same channels at batch 1 take F(2x2). */
START_TEST(test_conv_wino4_accuracy)
{
	for (int seed = 0; seed < 3; seed++)
		for (int64_t n = 1; n <= 4; n += 3) {
			struct harness h;
			struct dl_error err = {0};
			int64_t d[4] = {n, 128, 8, 8};
			struct dl_shape xs = dl_shape_make(4, d);
			ck_assert_msg(h_setup(&h, "conv2d", "out_channels: 32, kernel_size: 3, padding: 1",
					      &xs, 0, &err) == 0, "%s", err.msg);
			struct dl_rng r;
			dl_rng_seed(&r, 500 + seed);
			for (int64_t i = 0; i < h.nx; i++)
				h.x[i] = dl_rng_uniform(&r) < 0.5 ? 0.0f : (float)fabs(dl_rng_normal(&r));
			struct dl_param *w = h_param(&h, "weight"), *b = h_param(&h, "bias");
			int64_t nw = dl_shape_numel(&w->shape);
			for (int64_t j = 0; j < nw; j++)
				w->data[j] = (float)(dl_rng_normal(&r) * sqrt(2.0 / (9 * 128)));
			for (int64_t j = 0; j < 32; j++)
				b->data[j] = (float)(0.1 * dl_rng_normal(&r));
			h_forward(&h);
			struct ref rf = {n, 128, 8, 8, 32, 8, 8, 1, 3, 3, 1, 1, 1, 1, 1, 1, 0};
			double *y = calloc((size_t)h.ny, sizeof(double));
			ref_visit(&rf, REF_Y, y, h.x, w->data, NULL);
			for (int64_t i = 0; i < h.ny; i++)
				y[i] += b->data[i / 64 % 32];
			double e = rel_err_d(h.y, y, h.ny);
			ck_assert_msg(e < 1e-5, "batch %lld, seed %d: y off by %g", (long long)n, seed, e);
			free(y);
			h_free(&h);
		}
}
END_TEST

/* Winograd F(4x4)'s input transform works on WINO_CV = 16 channels at a
 * time (src/ops/conv.c, wino_input4): channel counts that are not a
 * multiple of 16 (a last chunk of 1 to 15), maps of a tile or a few
 * (7x7, 8x8, 5x7, 16x16: F(4x4) by wino_m; 5x5 takes F(2x2)), and at 2
 * threads batch 1 (one unit, its channels split between the threads, so
 * chunks start off a multiple of 16); against the float64 sum. */
START_TEST(test_conv_wino4_channels)
{
	struct { int64_t n, c, h, w, oc; } t[] = {
		{1, 23, 16, 16, 18}, {4, 19, 7, 7, 21}, {5, 33, 8, 8, 17},
		{4, 47, 5, 7, 16}, {4, 17, 5, 5, 16}, {2, 113, 16, 16, 24},
		{1, 31, 16, 16, 16},
	};
	int keep = dl_threads();
	for (size_t k = 0; k < sizeof t / sizeof *t; k++)
		for (int threads = 1; threads <= 2; threads++) {
			struct harness h;
			struct dl_error err = {0};
			char hps[96];
			snprintf(hps, sizeof hps, "out_channels: %lld, kernel_size: 3, padding: 1",
				 (long long)t[k].oc);
			dl_set_threads(threads);
			int64_t d[4] = {t[k].n, t[k].c, t[k].h, t[k].w};
			struct dl_shape xs = dl_shape_make(4, d);
			ck_assert_msg(h_setup(&h, "conv2d", hps, &xs, 0, &err) == 0, "%s", err.msg);
			struct dl_rng r;
			dl_rng_seed(&r, 700 + k);
			for (int64_t i = 0; i < h.nx; i++)
				h.x[i] = (float)dl_rng_uniform(&r) - 0.5f;
			struct dl_param *w = h_param(&h, "weight"), *b = h_param(&h, "bias");
			for (int i = 0; i < h.n.n_params; i++)
				for (int64_t j = 0; j < dl_shape_numel(&h.n.params[i].shape); j++)
					h.n.params[i].data[j] = (float)dl_rng_uniform(&r) - 0.5f;
			h_forward(&h);
			struct ref rf = {t[k].n, t[k].c, t[k].h, t[k].w, t[k].oc, t[k].h, t[k].w,
					 1, 3, 3, 1, 1, 1, 1, 1, 1, 0};
			double *y = calloc((size_t)h.ny, sizeof(double));
			ref_visit(&rf, REF_Y, y, h.x, w->data, NULL);
			for (int64_t i = 0; i < h.ny; i++)
				y[i] += b->data[i / (t[k].h * t[k].w) % t[k].oc];
			double e = rel_err_d(h.y, y, h.ny);
			ck_assert_msg(e < 1e-5, "[%lld, %lld, %lld, %lld] -> %lld, %d threads: y off by %g",
				      (long long)t[k].n, (long long)t[k].c, (long long)t[k].h,
				      (long long)t[k].w, (long long)t[k].oc, threads, e);
			free(y);
			h_free(&h);
		}
	dl_set_threads(keep);
}
END_TEST

/* A batch of zero samples: empty outputs, no gradients, no crash. */
START_TEST(test_zero_batch)
{
	struct { const char *op, *hps; int nd; int64_t in[4]; } t[] = {
		{"conv2d", "out_channels: 16, kernel_size: 3, padding: 1", 4, {0, 16, 6, 6}},
		{"conv2d", "out_channels: 4, kernel_size: 3, stride: 2", 4, {0, 3, 6, 6}},
		{"conv2d", "out_channels: 4, kernel_size: 3, groups: 4", 4, {0, 4, 6, 6}},
		{"conv_transpose1d", "out_channels: 4, kernel_size: 3, stride: 2", 3, {0, 3, 6}},
		{"max_pool2d", "kernel_size: 2", 4, {0, 3, 6, 6}},
		{"avg_pool1d", "kernel_size: 2", 3, {0, 3, 6}},
		{"adaptive_avg_pool2d", "output_size: 2", 4, {0, 3, 6, 6}},
		{"upsample", "scale_factor: 2, mode: bilinear", 4, {0, 3, 6, 6}},
		{"batch_norm2d", "", 4, {0, 3, 6, 6}},
		{"layer_norm", "", 3, {0, 3, 6}},
		{"adaptive_max_pool1d", "output_size: 4", 3, {0, 3, 6}},
		{"adaptive_max_pool2d", "output_size: [2, 3]", 4, {0, 3, 6, 5}},
		{"group_norm", "num_groups: 3", 4, {0, 6, 2, 2}},
		{"instance_norm2d", "affine: true, track_running_stats: true", 4, {0, 3, 6, 6}},
		{"max", "dim: [1, -1]", 3, {0, 3, 6}},
		{"argmax", "dim: 2, keepdim: true", 3, {0, 3, 6}},
		{"drop_path", "p: 0.5", 3, {0, 3, 6}},
	};
	int keep = dl_threads();
	dl_set_threads(2);
	for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
		struct harness h;
		struct dl_error err = {0};
		struct dl_shape xs = dl_shape_make(t[i].nd, t[i].in);
		ck_assert_msg(h_setup(&h, t[i].op, t[i].hps, &xs, 1, &err) == 0, "%s", err.msg);
		ck_assert(h.ny == 0);
		h_forward(&h);
		h_backward(&h);
		for (int k = 0; k < h.n.n_params; k++)
			if (h.n.params[k].buffer)
				ck_assert(h.n.params[k].data[0] == 0.0f);   /* untouched */
		h_free(&h);
	}
	dl_set_threads(keep);
}
END_TEST

/* ---- bad hyperparameters and inputs ---- */

/* Expects infer to fail with DL_EINPUT and a message "test:1:COL: OP: ..."
 * containing what, COL being where hyperparameter key starts in the
 * "{...}" that dl_node_setup parses (NULL: the entry, column 1). */
static void expect_error(const char *op, const char *hps, int ndim,
			 const int64_t *d, const char *key, const char *what)
{
	struct harness h;
	struct dl_error err = {0};
	struct dl_shape xs = dl_shape_make(ndim, d);
	int rc = h_setup(&h, op, hps, &xs, 0, &err);
	ck_assert_msg(rc == DL_EINPUT, "%s {%s}: expected an input error, got %d", op, hps, rc);
	char where[128];
	const char *k = key ? strstr(hps, key) : NULL;
	ck_assert(!key || k);
	snprintf(where, sizeof where, "test:1:%d: %s: ", k ? (int)(k - hps) + 2 : 1, op);
	ck_assert_msg(strncmp(err.msg, where, strlen(where)) == 0,
		      "%s: message '%s' does not start with '%s'", op, err.msg, where);
	ck_assert_msg(strstr(err.msg, what), "message '%s' does not say '%s'", err.msg, what);
	h_free(&h);
}

START_TEST(test_errors)
{
	int64_t img[4] = {2, 16, 5, 5}, sig[3] = {2, 3, 9}, flat[2] = {2, 3};
	expect_error("conv2d", "out_channels: 4, kernel_size: 7", 4, img, "kernel_size",
		     "kernel_size 7 is larger than the padded input 5x5");
	expect_error("conv2d", "out_channels: 4, kernel_size: 7, padding: [[1, 0], [0, 0]]", 4, img,
		     "kernel_size", "larger than the padded input 6x5");
	expect_error("conv2d", "out_channels: 4, kernel_size: [3, 8], padding: 1", 4, img,
		     "kernel_size", "kernel_size 3x8 is larger than the padded input 7x7");
	expect_error("conv2d", "out_channels: 4, kernel_size: 3, dilation: 3", 4, img, "kernel_size",
		     "spans 7 cells");
	expect_error("conv2d", "out_channels: 6, kernel_size: 3, groups: 3", 4, img, "groups",
		     "groups 3 does not divide in_channels 16");
	expect_error("conv2d", "out_channels: 6, kernel_size: 3, groups: 4", 4, img, "groups",
		     "groups 4 does not divide out_channels 6");
	expect_error("conv_transpose2d", "out_channels: 4, kernel_size: 3, groups: 3", 4, img,
		     "groups", "groups 3 does not divide in_channels 16");
	expect_error("conv2d", "out_channels: 4, kernel_size: 3", 2, flat, NULL,
		     "expects a [N, C, H, W] input, got [2, 3]");
	expect_error("conv1d", "out_channels: 4, kernel_size: 3", 4, img, NULL,
		     "expects a [N, C, L] input, got [2, 16, 5, 5]");
	expect_error("conv_transpose1d", "out_channels: 4, kernel_size: 3", 2, flat, NULL,
		     "expects a [N, C, L] input, got [2, 3]");
	expect_error("conv2d", "in_channels: 3, out_channels: 4, kernel_size: 3", 4, img,
		     "in_channels", "in_channels 3 does not match the input's 16 channels");
	expect_error("conv2d", "out_channels: 4, kernel_size: [3, 3, 3]", 4, img, "kernel_size",
		     "kernel_size has 3 values");
	expect_error("conv1d", "out_channels: 4, kernel_size: 3, padding: [1, 2]", 3, sig,
		     "padding", "padding has 2 values");
	expect_error("conv2d", "out_channels: 4, kernel_size: 3, padding: [[1, 2]]", 4, img,
		     "padding", "padding has 1 [before, after] pairs; give 2");
	expect_error("conv_transpose2d", "out_channels: 4, kernel_size: 3, padding: same", 4, img,
		     "padding", "no 'same' or 'valid'");
	expect_error("conv_transpose2d", "out_channels: 4, kernel_size: 3, stride: 2, output_padding: 2",
		     4, img, "output_padding", "output_padding 2 must be smaller than the stride");
	expect_error("conv_transpose1d", "out_channels: 4, kernel_size: 2, padding: [[5, 5]]", 3, sig,
		     "padding", "must leave at least one");
	expect_error("max_pool2d", "kernel_size: 6", 4, img, "kernel_size",
		     "kernel_size 6 is larger than the padded input 5x5");
	expect_error("max_pool2d", "kernel_size: 3", 3, sig, NULL,
		     "expects a [N, C, H, W] input, got [2, 3, 9]");
	expect_error("avg_pool1d", "kernel_size: 10", 3, sig, "kernel_size",
		     "kernel_size 10 is larger than the padded input 9");
	expect_error("max_pool1d", "kernel_size: 4, dilation: 3", 3, sig, "kernel_size",
		     "spans 10 cells, more than the padded input 9");
	expect_error("adaptive_avg_pool2d", "output_size: [2, 2, 2]", 4, img, "output_size",
		     "output_size has 3 values");
	expect_error("adaptive_avg_pool1d", "output_size: 2", 4, img, NULL,
		     "expects a [N, C, L] input");
	expect_error("upsample", "scale_factor: 2, mode: bilinear", 3, sig, "mode",
		     "mode bilinear expects a [N, C, H, W] input");
	expect_error("upsample", "scale_factor: 0.1", 3, sig, "scale_factor",
		     "empty output");
	expect_error("upsample", "scale_factor: 2", 2, flat, NULL,
		     "expects a [N, C, L] or [N, C, H, W] input");
	expect_error("batch_norm2d", "", 3, sig, NULL,
		     "expects a [N, C, H, W] input, got [2, 3, 9]");
	expect_error("batch_norm1d", "", 4, img, NULL,
		     "expects a [N, C] or [N, C, L] input");
	expect_error("batch_norm1d", "num_features: 4", 3, sig, "num_features",
		     "num_features 4 does not match the input's 3 channels");
	expect_error("layer_norm", "normalized_shape: [4, 9]", 3, sig, "normalized_shape",
		     "normalized_shape [4, 9] does not match the trailing sizes of the input [2, 3, 9]");
	expect_error("layer_norm", "normalized_shape: [2, 3, 9]", 3, sig, "normalized_shape",
		     "only 2 after the batch");
}
END_TEST

Suite *make_conv_suite(void)
{
	Suite *s = suite_create("conv");
	load_cases();
	TCase *tc = tcase_create("fixtures");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_fixture, 0, n_cases > 0 ? n_cases : 1);
	tcase_add_loop_test(tc, test_gradcheck, 0, n_cases > 0 ? n_cases : 1);
	suite_add_tcase(s, tc);
	tc = tcase_create("semantics");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_output_shapes);
	tcase_add_test(tc, test_pool_all_padding_windows);
	tcase_add_test(tc, test_maxpool_padded_backward_bits);
	tcase_add_test(tc, test_batch_norm_modes);
	tcase_add_test(tc, test_param_init);
	tcase_add_test(tc, test_conv_batch_consistency);
	tcase_add_test(tc, test_conv_threads);
	tcase_add_test(tc, test_conv_team_invariant);
	tcase_add_test(tc, test_conv_batch1_shared);
	tcase_add_test(tc, test_conv_rows_exact);
	tcase_add_test(tc, test_conv_unkept_im2col);
	tcase_add_test(tc, test_sgemm_team_invariant);
	tcase_add_test(tc, test_conv_small_one_thread);
	tcase_add_test(tc, test_sgemm_split_regions);
	tcase_add_test(tc, test_conv_large_reference);
	tcase_add_test(tc, test_im2col_row_widths);
	tcase_add_test(tc, test_conv_backward_groups);
	tcase_add_test(tc, test_conv_backward_rows);
	tcase_add_test(tc, test_conv_backward_adjoint);
	tcase_add_test(tc, test_conv_skinny);
	tcase_add_test(tc, test_depthwise_blocked);
	tcase_add_test(tc, test_conv_wide_rows);
	tcase_add_test(tc, test_pointwise_batched);
	tcase_add_test(tc, test_conv_wino4_accuracy);
	tcase_add_test(tc, test_conv_wino4_channels);
	tcase_add_test(tc, test_zero_batch);
	tcase_add_test(tc, test_errors);
	suite_add_tcase(s, tc);
	return s;
}
