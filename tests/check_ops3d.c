/* The 3-D ops beyond their PyTorch fixtures (tests/data/ops3d, run by
 * check_conv.c): PyTorch's default initialisation and parameter shapes,
 * conv3d and conv_transpose3d on volumes large enough for several GEMM
 * tiles and OpenMP threads against a naive float64 loop (forward, input,
 * weight and bias gradients), max pooling's NaNs and windows of padding
 * only, and batches of zero samples. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check_suites.h"
#include "engine/op.h"
#include "engine/rng.h"
#include "engine/threads.h"
#include "model/hparams.h"
#include "ops/registry.h"

/* A node of op on input x [d0..d4] with its buffers. */
struct node3 {
	struct dl_node n;
	struct dl_shape xs, ys;
	int64_t nx, ny;
	float *x, *y, *gy, *dx, *ws, *saved;
	struct dl_rng rng;
	struct dl_ctx ctx;
};

static void open3(struct node3 *t, const char *op, const char *hps, const int64_t *d, int train)
{
	struct dl_error err = {0};
	memset(t, 0, sizeof *t);
	const struct dl_op_desc *desc = dl_op_find(op);
	ck_assert_msg(desc != NULL, "op %s not registered", op);
	ck_assert_msg(dl_node_setup(&t->n, desc, hps, &err) == 0, "%s {%s}: %s", op, hps, err.msg);
	t->n.n_in = 1;
	t->n.in = calloc(1, sizeof *t->n.in);
	t->xs = dl_shape_make(5, d);
	ck_assert_msg(desc->infer(&t->n, &t->xs, &t->ys, &err) == 0, "%s {%s}: %s", op, hps, err.msg);
	t->nx = dl_shape_numel(&t->xs);
	t->ny = dl_shape_numel(&t->ys);
	t->x = calloc((size_t)t->nx + 1, sizeof(float));
	t->dx = calloc((size_t)t->nx + 1, sizeof(float));
	t->y = calloc((size_t)t->ny + 1, sizeof(float));
	t->gy = calloc((size_t)t->ny + 1, sizeof(float));
	t->ws = malloc(t->n.ws_bytes + 16);
	t->saved = malloc(t->n.saved_bytes + 16);
	dl_rng_seed(&t->rng, 7);
	for (int64_t i = 0; i < t->nx; i++)
		t->x[i] = (float)dl_rng_uniform(&t->rng) - 0.5f;
	for (int64_t i = 0; i < t->ny; i++)
		t->gy[i] = (float)dl_rng_uniform(&t->rng) - 0.5f;
	for (int i = 0; i < t->n.n_params; i++) {
		struct dl_param *p = &t->n.params[i];
		int64_t k = dl_shape_numel(&p->shape);
		p->data = calloc((size_t)k + 1, sizeof(float));
		p->grad = p->buffer ? NULL : calloc((size_t)k + 1, sizeof(float));
		for (int64_t j = 0; j < k && !p->buffer; j++)
			p->data[j] = (float)dl_rng_uniform(&t->rng) - 0.5f;
	}
	t->ctx.ws = t->ws;
	t->ctx.saved = t->saved;
	t->ctx.train = train;
	t->ctx.rng = &t->rng;
}

static void run3(struct node3 *t)
{
	struct dl_tensor in = {t->xs, t->x}, out = {t->ys, t->y};
	float *din[1] = {t->dx};
	t->n.op->forward(&t->n, &in, &out, &t->ctx);
	t->n.op->backward(&t->n, &in, &out, t->gy, din, &t->ctx);
}

static void close3(struct node3 *t)
{
	for (int i = 0; i < t->n.n_params; i++) {
		free(t->n.params[i].data);
		free(t->n.params[i].grad);
	}
	free(t->x);
	free(t->dx);
	free(t->y);
	free(t->gy);
	free(t->ws);
	free(t->saved);
	dl_node_release(&t->n);
}

START_TEST(test_init3d)
{
	struct node3 t;
	int64_t d[5] = {1, 6, 5, 5, 5};
	char s[64];
	open3(&t, "conv3d", "out_channels: 4, kernel_size: [3, 2, 1], groups: 2", d, 0);
	ck_assert_int_eq(t.n.n_params, 2);
	ck_assert_str_eq(dl_shape_str(&t.n.params[0].shape, s, sizeof s), "[4, 3, 3, 2, 1]");
	ck_assert(t.n.params[0].init == DL_INIT_UNIFORM && t.n.params[1].init == DL_INIT_UNIFORM);
	ck_assert(fabs(t.n.params[0].init_arg - 1.0 / sqrt(3 * 6)) < 1e-12);
	ck_assert(fabs(t.n.params[1].init_arg - 1.0 / sqrt(3 * 6)) < 1e-12);
	close3(&t);
	open3(&t, "conv_transpose3d", "out_channels: 4, kernel_size: 3, groups: 2, bias: false", d, 0);
	ck_assert_int_eq(t.n.n_params, 1);
	ck_assert_str_eq(dl_shape_str(&t.n.params[0].shape, s, sizeof s), "[6, 2, 3, 3, 3]");
	ck_assert(fabs(t.n.params[0].init_arg - 1.0 / sqrt(2 * 27)) < 1e-12);
	close3(&t);
	open3(&t, "batch_norm3d", "", d, 0);
	ck_assert_int_eq(t.n.n_params, 4);
	const char *names[4] = {"weight", "bias", "running_mean", "running_var"};
	enum dl_init inits[4] = {DL_INIT_ONES, DL_INIT_ZEROS, DL_INIT_ZEROS, DL_INIT_ONES};
	for (int i = 0; i < 4; i++) {
		int k = dl_node_find_param(&t.n, names[i]);
		ck_assert_msg(k >= 0, "batch_norm3d has no %s", names[i]);
		ck_assert(t.n.params[k].init == inits[i]);
		ck_assert(t.n.params[k].buffer == (i >= 2));
	}
	close3(&t);
}
END_TEST

/* ---- a naive float64 reference of both convolutions ---- */

struct cgeom {
	int64_t N, C, OC, G, I[3], O[3], k[3], s[3], d[3], p[3];
	int transposed;
};

/* Calls visit for every (input cell, output cell, weight) triple of the
 * convolution: y[yi] += w[wi] x[xi]. */
static void conv_visit(const struct cgeom *g, void (*visit)(void *, int64_t, int64_t, int64_t),
		       void *u)
{
	int64_t Cg = g->C / g->G, OCg = g->OC / g->G;
	/* the convolution's window side: conv3d reads x at the windows of y;
	 * the transposed op writes y at the windows of x */
	const int64_t *W = g->transposed ? g->I : g->O;     /* window positions */
	const int64_t *V = g->transposed ? g->O : g->I;     /* the volume indexed */
	for (int64_t n = 0; n < g->N; n++)
	for (int64_t gi = 0; gi < g->G; gi++)
	for (int64_t c = 0; c < Cg; c++)
	for (int64_t o = 0; o < OCg; o++)
	for (int64_t a = 0; a < W[0]; a++)
	for (int64_t b = 0; b < W[1]; b++)
	for (int64_t e = 0; e < W[2]; e++)
	for (int64_t i = 0; i < g->k[0]; i++)
	for (int64_t j = 0; j < g->k[1]; j++)
	for (int64_t l = 0; l < g->k[2]; l++) {
		int64_t z = a * g->s[0] - g->p[0] + i * g->d[0];
		int64_t y = b * g->s[1] - g->p[1] + j * g->d[1];
		int64_t x = e * g->s[2] - g->p[2] + l * g->d[2];
		if (z < 0 || z >= V[0] || y < 0 || y >= V[1] || x < 0 || x >= V[2])
			continue;
		int64_t win = (a * W[1] + b) * W[2] + e, cell = (z * V[1] + y) * V[2] + x;
		int64_t ci = gi * Cg + c, oi = gi * OCg + o, kk = (i * g->k[1] + j) * g->k[2] + l;
		int64_t xi, yi, wi;
		if (!g->transposed) {
			xi = (n * g->C + ci) * (V[0] * V[1] * V[2]) + cell;
			yi = (n * g->OC + oi) * (W[0] * W[1] * W[2]) + win;
			wi = (oi * Cg + c) * g->k[0] * g->k[1] * g->k[2] + kk;
		} else {
			xi = (n * g->C + ci) * (W[0] * W[1] * W[2]) + win;
			yi = (n * g->OC + oi) * (V[0] * V[1] * V[2]) + cell;
			wi = (ci * OCg + o) * g->k[0] * g->k[1] * g->k[2] + kk;
		}
		visit(u, xi, yi, wi);
	}
}

struct refbufs {
	const float *x, *w, *gy;
	double *y, *dx, *dw;
};

static void ref_visit(void *u, int64_t xi, int64_t yi, int64_t wi)
{
	struct refbufs *r = u;
	r->y[yi] += (double)r->w[wi] * r->x[xi];
	r->dx[xi] += (double)r->w[wi] * r->gy[yi];
	r->dw[wi] += (double)r->x[xi] * r->gy[yi];
}

/* ||got - want||_inf / ||want||_inf */
static double rel_err(const float *got, const double *want, int64_t n)
{
	double num = 0.0, den = 0.0;
	for (int64_t i = 0; i < n; i++) {
		double e = fabs(got[i] - want[i]);
		if (!(e <= num))
			num = e;
		if (fabs(want[i]) > den)
			den = fabs(want[i]);
	}
	return den > 0 ? num / den : num;
}

static void check_conv(const char *op, const char *hps, const int64_t *d,
		       const struct cgeom *gin)
{
	struct node3 t;
	open3(&t, op, hps, d, 1);
	struct cgeom g = *gin;
	g.N = d[0];
	g.C = d[1];
	g.OC = t.ys.d[1];
	for (int i = 0; i < 3; i++) {
		g.I[i] = d[2 + i];
		g.O[i] = t.ys.d[2 + i];
	}
	run3(&t);
	int64_t nw = dl_shape_numel(&t.n.params[0].shape);
	struct refbufs r = {t.x, t.n.params[0].data, t.gy, calloc((size_t)t.ny, sizeof(double)),
			    calloc((size_t)t.nx, sizeof(double)), calloc((size_t)nw, sizeof(double))};
	conv_visit(&g, ref_visit, &r);
	const float *b = t.n.params[1].data;
	double *db = calloc((size_t)g.OC, sizeof(double));
	int64_t P = t.ny / (g.N * g.OC);
	for (int64_t n = 0; n < g.N; n++)
		for (int64_t o = 0; o < g.OC; o++)
			for (int64_t q = 0; q < P; q++) {
				r.y[(n * g.OC + o) * P + q] += b[o];
				db[o] += t.gy[(n * g.OC + o) * P + q];
			}
	double e;
	ck_assert_msg((e = rel_err(t.y, r.y, t.ny)) < 1e-5, "%s {%s}: y error %g", op, hps, e);
	ck_assert_msg((e = rel_err(t.dx, r.dx, t.nx)) < 1e-5, "%s {%s}: dx error %g", op, hps, e);
	ck_assert_msg((e = rel_err(t.n.params[0].grad, r.dw, nw)) < 1e-5, "%s {%s}: dw error %g",
		      op, hps, e);
	ck_assert_msg((e = rel_err(t.n.params[1].grad, db, g.OC)) < 1e-5, "%s {%s}: db error %g",
		      op, hps, e);
	free(r.y);
	free(r.dx);
	free(r.dw);
	free(db);
	close3(&t);
}

/* Volumes whose columns take several tiles (a ragged last one included),
 * on two threads. */
START_TEST(test_conv3d_tiles)
{
	int keep = dl_threads();
	dl_set_threads(2);
	int64_t big[5] = {1, 16, 5, 32, 32};
	struct cgeom g = {.k = {3, 3, 3}, .s = {1, 1, 1}, .d = {1, 1, 1}, .p = {1, 1, 1}, .G = 1};
	check_conv("conv3d", "out_channels: 4, kernel_size: 3, padding: 1", big, &g);
	int64_t odd[5] = {2, 4, 9, 7, 8};
	struct cgeom h = {.k = {2, 3, 2}, .s = {2, 1, 2}, .d = {1, 2, 1}, .p = {1, 0, 1}, .G = 2};
	check_conv("conv3d", "out_channels: 6, kernel_size: [2, 3, 2], stride: [2, 1, 2], "
		   "dilation: [1, 2, 1], padding: [1, 0, 1], groups: 2", odd, &h);
	int64_t tin[5] = {1, 4, 5, 32, 32};
	struct cgeom tr = {.k = {3, 3, 3}, .s = {1, 1, 1}, .d = {1, 1, 1}, .p = {0, 0, 0}, .G = 1,
			   .transposed = 1};
	check_conv("conv_transpose3d", "out_channels: 16, kernel_size: 3", tin, &tr);
	int64_t todd[5] = {2, 4, 3, 4, 5};
	struct cgeom tr2 = {.k = {2, 3, 2}, .s = {2, 1, 3}, .d = {1, 2, 1}, .p = {1, 1, 0}, .G = 2,
			    .transposed = 1};
	check_conv("conv_transpose3d", "out_channels: 6, kernel_size: [2, 3, 2], stride: [2, 1, 3], "
		   "dilation: [1, 2, 1], padding: [1, 1, 0], output_padding: [1, 0, 2], groups: 2",
		   todd, &tr2);
	dl_set_threads(keep);
}
END_TEST

/* A batch of zero samples: empty outputs, no crash, running statistics
 * untouched. */
START_TEST(test_zero_batch3d)
{
	struct { const char *op, *hps; } t[] = {
		{"conv3d", "out_channels: 4, kernel_size: 3, padding: 1"},
		{"conv_transpose3d", "out_channels: 4, kernel_size: 2, stride: 2"},
		{"max_pool3d", "kernel_size: 2"},
		{"avg_pool3d", "kernel_size: 3, padding: 1"},
		{"adaptive_avg_pool3d", "output_size: [2, 1, 3]"},
		{"batch_norm3d", ""},
	};
	int64_t d[5] = {0, 3, 4, 5, 6};
	for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
		struct node3 n;
		open3(&n, t[i].op, t[i].hps, d, 1);
		ck_assert(n.ny == 0);
		run3(&n);
		for (int k = 0; k < n.n.n_params; k++)
			if (n.n.params[k].buffer)
				ck_assert(n.n.params[k].data[0] == 0.0f);
		close3(&n);
	}
}
END_TEST

/* max_pool3d: a NaN in a window wins, forward and backward (the last
 * NaN, as PyTorch's scan), and a window over padding only gives -inf and
 * no gradient. */
START_TEST(test_maxpool3d_nan_padding)
{
	struct node3 t;
	int64_t d[5] = {1, 1, 1, 2, 3};
	open3(&t, "max_pool3d", "kernel_size: [1, 2, 3], stride: [1, 1, 4], padding: [0, 0, 3]", d, 1);
	ck_assert_int_eq(t.ny, 2);
	float x[6] = {1.0f, NAN, 2.0f, 5.0f, NAN, -1.0f};
	memcpy(t.x, x, sizeof x);
	t.gy[0] = 3.0f;
	t.gy[1] = 7.0f;
	run3(&t);
	/* windows: columns -3..-1 (padding only) and 1..3 (cells 1, 2) */
	ck_assert(isinf(t.y[0]) && t.y[0] < 0);
	ck_assert(isnan(t.y[1]));
	for (int i = 0; i < 6; i++)
		ck_assert_msg(t.dx[i] == (i == 4 ? 7.0f : 0.0f), "dx[%d] = %g", i, t.dx[i]);
	close3(&t);
}
END_TEST

Suite *make_ops3d_suite(void)
{
	Suite *s = suite_create("ops3d");
	TCase *tc = tcase_create("ops3d");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_init3d);
	tcase_add_test(tc, test_conv3d_tiles);
	tcase_add_test(tc, test_zero_batch3d);
	tcase_add_test(tc, test_maxpool3d_nan_padding);
	suite_add_tcase(s, tc);
	return s;
}
