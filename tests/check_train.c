/* The training core against PyTorch: losses and their gradients, optimizer
 * steps, gradient clipping and learning-rate schedules, compared with the
 * fixtures of tools/gen_train_fixtures.py in tests/data/train; plus label
 * checks, finite differences, and a bit-exact optimizer state round trip. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "check_suites.h"
#include "io/npy.h"
#include "train/data.h"
#include "train/loss.h"
#include "train/optim.h"

#ifndef SRCDIR
#define SRCDIR "."
#endif
#define DATA SRCDIR "/tests/data/train/"

#define LOSS_TOL 1e-6
#define OPTIM_TOL 1e-5

/* ---- fixtures ---- */

/* Reads DATA/name.npy as float32; the caller frees the result. */
static float *load_f32(const char *name, struct dl_shape *shape)
{
	char path[512];
	snprintf(path, sizeof path, DATA "%s.npy", name);
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	struct dl_error err = {0};
	struct dl_tensor t;
	int rc = dl_npy_read(f, path, &t, &err);
	fclose(f);
	ck_assert_msg(rc == 1, "%s: %s", path, err.msg);
	if (shape)
		*shape = t.shape;
	return t.data;
}

/* Reads DATA/name.npy as int64; the caller frees the result. */
static int64_t *load_i64(const char *name, struct dl_shape *shape)
{
	char path[512];
	snprintf(path, sizeof path, DATA "%s.npy", name);
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	struct dl_error err = {0};
	struct dl_npy_header h;
	ck_assert_msg(dl_npy_read_header(f, path, &h, &err) == 1, "%s: %s",
		      path, err.msg);
	int64_t *d = malloc((size_t)(h.numel ? h.numel : 1) * sizeof *d);
	ck_assert_ptr_nonnull(d);
	ck_assert_msg(dl_npy_read_i64(f, path, &h, h.numel, d, &err) == 0,
		      "%s: %s", path, err.msg);
	fclose(f);
	if (shape)
		*shape = h.shape;
	return d;
}

/* max |a - b| / max |b|: the relative error in the infinity norm. */
static double rel_err(const float *a, const float *b, int64_t n)
{
	double diff = 0, scale = 0;
	for (int64_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);
		diff = d > diff || isnan(d) ? d : diff;
		scale = fabs(b[i]) > scale ? fabs(b[i]) : scale;
	}
	return diff / (scale > 0 ? scale : 1);
}

static double rel_err1(double a, double b)
{
	return fabs(a - b) / (fabs(b) > 0 ? fabs(b) : 1);
}

/* ---- losses ---- */

/* One loss fixture: NAME_x, NAME_y, NAME_loss, NAME_grad. The loss-only
 * call (NULL gradient) must give the same value. */
static void check_loss_fixture(const char *name, enum dl_loss kind,
			       int64_t ignore_index)
{
	char buf[64];
	struct dl_shape xs, ys;
	snprintf(buf, sizeof buf, "%s_x", name);
	float *x = load_f32(buf, &xs);
	snprintf(buf, sizeof buf, "%s_y", name);
	int64_t *ids = NULL;
	float *vals = NULL;
	if (dl_loss_takes_ids(kind))
		ids = load_i64(buf, &ys);
	else
		vals = load_f32(buf, &ys);
	snprintf(buf, sizeof buf, "%s_loss", name);
	float *want_loss = load_f32(buf, NULL);
	snprintf(buf, sizeof buf, "%s_grad", name);
	float *want_grad = load_f32(buf, NULL);

	struct dl_error err = {0};
	int64_t rows, cols;
	ck_assert_msg(dl_loss_shape(kind, &xs, &ys, &rows, &cols, &err) == 0,
		      "%s", err.msg);
	if (ids)
		ck_assert_msg(dl_loss_check_labels(ids, rows, cols, ignore_index,
						   name, &err) == 0, "%s", err.msg);
	int64_t n = rows * cols;
	float *grad = malloc((size_t)n * sizeof *grad);
	for (int64_t i = 0; i < n; i++)
		grad[i] = NAN;  /* every element must be written */
	double loss = dl_loss_eval(kind, x, ids, vals, rows, cols,
				   ignore_index, grad);
	double loss_only = dl_loss_eval(kind, x, ids, vals, rows, cols,
					ignore_index, NULL);
	ck_assert_msg(rel_err1(loss, want_loss[0]) <= LOSS_TOL,
		      "%s: loss %.9g, PyTorch %.9g", name, loss, want_loss[0]);
	ck_assert_msg(loss == loss_only, "%s: %.17g without gradient, %.17g with",
		      name, loss_only, loss);
	double e = rel_err(grad, want_grad, n);
	ck_assert_msg(e <= LOSS_TOL, "%s: gradient off by %.3g", name, e);
	free(grad);
	free(x);
	free(ids);
	free(vals);
	free(want_loss);
	free(want_grad);
}

START_TEST(test_ce_2d)
{
	check_loss_fixture("ce2d", DL_LOSS_CROSS_ENTROPY, DL_IGNORE_INDEX_DEFAULT);
}
END_TEST

START_TEST(test_ce_3d)
{
	/* [3, 4, 7] logits, [3, 4] labels, ignore_index 0 */
	check_loss_fixture("ce3d", DL_LOSS_CROSS_ENTROPY, 0);
}
END_TEST

START_TEST(test_nll)
{
	check_loss_fixture("nll", DL_LOSS_NLL, DL_IGNORE_INDEX_DEFAULT);
}
END_TEST

START_TEST(test_mse)
{
	check_loss_fixture("mse", DL_LOSS_MSE, DL_IGNORE_INDEX_DEFAULT);
}
END_TEST

START_TEST(test_bce_with_logits)
{
	check_loss_fixture("bce", DL_LOSS_BCE_WITH_LOGITS, DL_IGNORE_INDEX_DEFAULT);
}
END_TEST

START_TEST(test_ce_all_ignored)
{
	/* PyTorch gives nan; dlrun gives 0 and a zero gradient (loss.h) */
	const float x[6] = {1, 2, 3, 4, 5, 6};
	const int64_t y[2] = {-100, -100};
	float d[6] = {1, 1, 1, 1, 1, 1};
	ck_assert(dl_loss_cross_entropy(x, y, 2, 3, -100, d) == 0.0);
	for (int i = 0; i < 6; i++)
		ck_assert(d[i] == 0.0f);
	ck_assert(dl_loss_nll(x, y, 2, 3, -100, d) == 0.0);
	ck_assert_int_eq(dl_loss_count_targets(y, 2, -100), 0);
}
END_TEST

START_TEST(test_ce_extreme_logits)
{
	/* large logits: no overflow, exact zero loss for a certain answer */
	const float x[4] = {1000.0f, -1000.0f, -1000.0f, 1000.0f};
	const int64_t y[2] = {0, 0};
	float d[4];
	double l = dl_loss_cross_entropy(x, y, 2, 2, -100, d);
	ck_assert(isfinite(l));
	ck_assert(fabs(l - 1000.0) < 1e-9);  /* (0 + 2000) / 2 */
	ck_assert(d[0] == 0.0f && d[1] == 0.0f);
	ck_assert(d[2] == -0.5f && d[3] == 0.5f);
}
END_TEST

/* Central differences in double on a loss function of float inputs. */
START_TEST(test_loss_finite_differences)
{
	enum { R = 3, C = 4, N = R * C };
	float x[N], t[N], d[N];
	const int64_t y[R] = {2, -100, 0};
	for (int i = 0; i < N; i++) {
		x[i] = (float)sin(1.3 * i + 0.2) * 2.0f;
		t[i] = (float)(0.5 + 0.5 * cos(0.7 * i));
	}
	for (int k = 0; k < DL_LOSS_COUNT; k++) {
		enum dl_loss kind = (enum dl_loss)k;
		const int64_t *ids = dl_loss_takes_ids(kind) ? y : NULL;
		int64_t rows = ids ? R : N, cols = ids ? C : 1;
		dl_loss_eval(kind, x, ids, t, rows, cols, -100, d);
		for (int i = 0; i < N; i++) {
			const float h = 1e-2f;
			float keep = x[i];
			x[i] = keep + h;
			double up = dl_loss_eval(kind, x, ids, t, rows, cols, -100, NULL);
			x[i] = keep - h;
			double dn = dl_loss_eval(kind, x, ids, t, rows, cols, -100, NULL);
			x[i] = keep;
			double fd = (up - dn) / (2.0 * h);
			ck_assert_msg(fabs(fd - d[i]) <= 1e-3 * (1 + fabs(fd)),
				      "%s: element %d: analytic %g, numeric %g",
				      dl_loss_name(kind), i, d[i], fd);
		}
	}
}
END_TEST

/* Sums run over a fixed chunk partition: the thread count must not change
 * a single bit of the loss (a resumed run must end with the same bytes). */
START_TEST(test_loss_thread_independent)
{
	enum { R = 4096, C = 16, N = R * C };
	float *x = malloc(N * sizeof *x), *d1 = malloc(N * sizeof *d1);
	float *d2 = malloc(N * sizeof *d2), *t = malloc(N * sizeof *t);
	int64_t *y = malloc(R * sizeof *y);
	ck_assert(x && d1 && d2 && t && y);
	for (int i = 0; i < N; i++) {
		x[i] = (float)sin(0.001 * i * i) * 4.0f;
		t[i] = (float)(0.5 + 0.5 * cos(0.01 * i));
	}
	for (int i = 0; i < R; i++)
		y[i] = (i * 7) % C;
	for (int k = 0; k < DL_LOSS_COUNT; k++) {
		enum dl_loss kind = (enum dl_loss)k;
		int64_t rows = dl_loss_takes_ids(kind) ? R : N;
		int64_t cols = dl_loss_takes_ids(kind) ? C : 1;
#ifdef _OPENMP
		omp_set_num_threads(1);
#endif
		double l1 = dl_loss_eval(kind, x, y, t, rows, cols, -100, d1);
#ifdef _OPENMP
		omp_set_num_threads(3);
#endif
		double l2 = dl_loss_eval(kind, x, y, t, rows, cols, -100, d2);
		ck_assert_msg(memcmp(&l1, &l2, sizeof l1) == 0, "%s: %.17g vs %.17g",
			      dl_loss_name(kind), l1, l2);
		ck_assert(memcmp(d1, d2, N * sizeof *d1) == 0);
	}
	free(x), free(d1), free(d2), free(t), free(y);
}
END_TEST

START_TEST(test_check_labels)
{
	struct dl_error err = {0};
	const int64_t ok[4] = {0, 9, -100, 3};
	ck_assert_int_eq(dl_loss_check_labels(ok, 4, 10, -100, "y.npy", &err), 0);
	const int64_t bad[5] = {0, 9, 3, 10, -1};
	ck_assert_int_eq(dl_loss_check_labels(bad, 5, 10, -100, "y.npy", &err),
			 DL_EINPUT);
	ck_assert_msg(strstr(err.msg, "y.npy: label 10 at index 3") != NULL,
		      "%s", err.msg);
	ck_assert_msg(strstr(err.msg, "10 classes") != NULL, "%s", err.msg);
	dl_error_clear(&err);
	/* with another ignore index, -100 is out of range */
	ck_assert_int_eq(dl_loss_check_labels(ok, 4, 10, 0, "y.npy", &err),
			 DL_EINPUT);
	ck_assert_msg(strstr(err.msg, "label -100 at index 2") != NULL, "%s",
		      err.msg);
}
END_TEST

START_TEST(test_loss_shapes)
{
	struct dl_error err = {0};
	int64_t rows, cols;
	int64_t d3[3] = {2, 5, 11}, d2[2] = {2, 5}, d1[1] = {2}, dcol[2] = {2, 1};
	struct dl_shape o3 = dl_shape_make(3, d3), o2 = dl_shape_make(2, d2);
	struct dl_shape s1 = dl_shape_make(1, d1), col = dl_shape_make(2, dcol);
	ck_assert_int_eq(dl_loss_shape(DL_LOSS_CROSS_ENTROPY, &o3, &o2, &rows,
				       &cols, &err), 0);
	ck_assert(rows == 10 && cols == 11);
	ck_assert_int_eq(dl_loss_shape(DL_LOSS_NLL, &o2, &s1, &rows, &cols,
				       &err), 0);
	ck_assert(rows == 2 && cols == 5);
	/* labels [2, 5] for logits [2, 5]: not class ids */
	ck_assert_int_eq(dl_loss_shape(DL_LOSS_CROSS_ENTROPY, &o2, &o2, &rows,
				       &cols, &err), DL_EINPUT);
	ck_assert_msg(strstr(err.msg, "expected class ids of shape [2]") != NULL,
		      "%s", err.msg);
	dl_error_clear(&err);
	ck_assert_int_eq(dl_loss_shape(DL_LOSS_MSE, &o2, &o2, &rows, &cols,
				       &err), 0);
	ck_assert(rows == 10 && cols == 1);
	ck_assert_int_eq(dl_loss_shape(DL_LOSS_MSE, &col, &s1, &rows, &cols,
				       &err), 0);
	ck_assert(rows == 2);
	ck_assert_int_eq(dl_loss_shape(DL_LOSS_BCE_WITH_LOGITS, &o2, &s1, &rows,
				       &cols, &err), DL_EINPUT);
	ck_assert_msg(strstr(err.msg, "[2, 5]") != NULL, "%s", err.msg);
}
END_TEST

START_TEST(test_loss_names)
{
	struct dl_error err = {0};
	enum dl_loss k;
	for (int i = 0; i < DL_LOSS_COUNT; i++) {
		ck_assert_int_eq(dl_loss_from_name(dl_loss_name((enum dl_loss)i),
						   &k, &err), 0);
		ck_assert_int_eq(k, i);
	}
	ck_assert_int_eq(dl_loss_from_name("cross_entrpy", &k, &err), DL_EINPUT);
	ck_assert_msg(strstr(err.msg, "did you mean 'cross_entropy'") != NULL,
		      "%s", err.msg);
}
END_TEST

START_TEST(test_accuracy)
{
	const float x[8] = {0.1f, 0.9f,  /* 1 */
			    0.5f, 0.5f,  /* tie: first, 0 */
			    2.0f, 1.0f,  /* 0 */
			    0.0f, 3.0f}; /* 1, ignored */
	const int64_t y[4] = {1, 0, 1, -100};
	int64_t total;
	ck_assert_int_eq(dl_loss_correct(x, y, 4, 2, -100, &total), 2);
	ck_assert_int_eq(total, 3);
	const float t[4] = {1, 0, 0, 1};
	ck_assert_int_eq(dl_loss_correct_binary(x, t, 4), 2);
}
END_TEST

/* ---- optimizers ---- */

/* The fixtures' parameters are [4, 3] and [5]; here they sit in a block
 * with a 3-element buffer between them, which must stay untouched. */
#define NP 17
#define NBLOCK 20
static const struct dl_range fixture_ranges[2] = {{0, 12}, {15, 5}};

static void to_block(float *block, const float *flat, float gap)
{
	memcpy(block, flat, 12 * sizeof *block);
	block[12] = block[13] = block[14] = gap;
	memcpy(block + 15, flat + 12, 5 * sizeof *block);
}

static struct dl_optim_config fixture_config(int i)
{
	struct dl_optim_config c;
	switch (i) {
	case 0:   /* sgd_plain: lr 0.1 */
		return dl_optim_defaults(DL_OPTIM_SGD);
	case 1:   /* sgd_momentum: lr 0.05 */
		c = dl_optim_defaults(DL_OPTIM_SGD);
		c.momentum = 0.9, c.dampening = 0.1, c.weight_decay = 0.01;
		return c;
	case 2:   /* sgd_nesterov: lr 0.05 */
		c = dl_optim_defaults(DL_OPTIM_SGD);
		c.momentum = 0.9, c.nesterov = 1, c.weight_decay = 0.001;
		return c;
	case 3:   /* adam: lr 0.01 */
		c = dl_optim_defaults(DL_OPTIM_ADAM);
		c.beta1 = 0.8, c.beta2 = 0.95, c.eps = 1e-6, c.weight_decay = 0.02;
		return c;
	default:  /* adamw: lr 0.01, default betas and eps */
		c = dl_optim_defaults(DL_OPTIM_ADAMW);
		c.weight_decay = 0.05;
		return c;
	}
}

static const char *const fixture_names[] = {
	"sgd_plain", "sgd_momentum", "sgd_nesterov", "adam", "adamw",
};

START_TEST(test_optim_parity)
{
	const char *name = fixture_names[_i];
	struct dl_optim_config cfg = fixture_config(_i);
	char buf[64];
	snprintf(buf, sizeof buf, "opt_%s_p0", name);
	float *p0 = load_f32(buf, NULL);
	snprintf(buf, sizeof buf, "opt_%s_g", name);
	float *g = load_f32(buf, NULL);       /* [3, 17] */
	snprintf(buf, sizeof buf, "opt_%s_p", name);
	float *want = load_f32(buf, NULL);    /* [3, 17] after each step */
	snprintf(buf, sizeof buf, "opt_%s_lr", name);
	float *lr = load_f32(buf, NULL);      /* [3] */

	struct dl_optim o;
	struct dl_error err = {0};
	ck_assert_msg(dl_optim_init(&o, &cfg, NBLOCK, fixture_ranges, 2, &err)
		      == 0, "%s", err.msg);
	float p[NBLOCK], grad[NBLOCK], got[NP];
	to_block(p, p0, 7.0f);
	for (int s = 0; s < 3; s++) {
		to_block(grad, g + s * NP, 1e3f);  /* buffer "gradients": ignored */
		dl_optim_step(&o, p, grad, lr[s]);
		memcpy(got, p, 12 * sizeof *got);
		memcpy(got + 12, p + 15, 5 * sizeof *got);
		double e = rel_err(got, want + s * NP, NP);
		ck_assert_msg(e <= OPTIM_TOL, "%s: step %d off by %.3g", name,
			      s + 1, e);
		ck_assert(p[12] == 7.0f && p[13] == 7.0f && p[14] == 7.0f);
	}
	ck_assert_int_eq(o.step, 3);
	if (o.m)
		ck_assert(o.m[13] == 0.0f);
	dl_optim_free(&o);
	dl_optim_free(&o);  /* idempotent */
	free(p0);
	free(g);
	free(want);
	free(lr);
}
END_TEST

/* A checkpoint saves step, m and v; restoring them into a fresh optimizer
 * must continue bit-identically. */
START_TEST(test_optim_state_round_trip)
{
	struct dl_optim_config cfg = fixture_config(_i);
	float g[3][NBLOCK], p_run[NBLOCK], p_res[NBLOCK];
	for (int s = 0; s < 3; s++)
		for (int i = 0; i < NBLOCK; i++)
			g[s][i] = (float)sin(0.37 * i + 1.1 * s);
	for (int i = 0; i < NBLOCK; i++)
		p_run[i] = (float)cos(0.5 * i);
	struct dl_optim a, b;
	struct dl_error err = {0};
	ck_assert_int_eq(dl_optim_init(&a, &cfg, NBLOCK, fixture_ranges, 2, &err), 0);
	ck_assert_int_eq(dl_optim_init(&b, &cfg, NBLOCK, fixture_ranges, 2, &err), 0);
	dl_optim_step(&a, p_run, g[0], 0.01);
	/* "save" after step 1 */
	memcpy(p_res, p_run, sizeof p_res);
	b.step = a.step;
	if (a.m)
		memcpy(b.m, a.m, NBLOCK * sizeof *a.m);
	if (a.v)
		memcpy(b.v, a.v, NBLOCK * sizeof *a.v);
	for (int s = 1; s < 3; s++) {
		dl_optim_step(&a, p_run, g[s], 0.01);
		dl_optim_step(&b, p_res, g[s], 0.01);
	}
	ck_assert(memcmp(p_run, p_res, sizeof p_run) == 0);
	dl_optim_free(&a);
	dl_optim_free(&b);
}
END_TEST

/* torch.optim.Adam / AdamW of PyTorch 1.13 (torch/optim/adam.py and
 * adamw.py, _single_tensor_adam(w), no amsgrad) on one float32 element,
 * one tensor operation at a time, each rounded to float, the Python-float
 * scalars cast to float as the CPU kernels do; step is the step after
 * its increment:
 *   adamw: param.mul_(1 - lr * weight_decay)
 *   adam:  grad = grad.add(param, alpha=weight_decay)
 *   exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
 *   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
 *   step_size = lr / (1 - beta1 ** step)
 *   denom = (exp_avg_sq.sqrt() / math.sqrt(1 - beta2 ** step)).add_(eps)
 *   param.addcdiv_(exp_avg, denom, value=-step_size)
 * (addcmul_ is self + value * t1 * t2, addcdiv_ self + value * t1 / t2.)
 * The same formula in numpy float32 gave torch.optim.Adam's and AdamW's
 * bits (PyTorch 1.13, one thread, lengths 1, 3 and 7, these four
 * configurations). */
static void adam_ref(const struct dl_optim_config *c, double step, double lr, float *p,
		     float g, float *m, float *v)
{
	float param = *p, grad = g;
	if (c->kind == DL_OPTIM_ADAMW)
		param = param * (float)(1.0 - lr * c->weight_decay);
	else if (c->weight_decay != 0)
		grad = grad + (float)c->weight_decay * param;
	float exp_avg = *m * (float)c->beta1;
	exp_avg = exp_avg + (float)(1.0 - c->beta1) * grad;
	float exp_avg_sq = *v * (float)c->beta2;
	exp_avg_sq = exp_avg_sq + (float)(1.0 - c->beta2) * grad * grad;
	double step_size = lr / (1.0 - pow(c->beta1, step));
	float denom = sqrtf(exp_avg_sq) / (float)sqrt(1.0 - pow(c->beta2, step));
	denom = denom + (float)c->eps;
	*p = param + (float)-step_size * exp_avg / denom;
	*m = exp_avg;
	*v = exp_avg_sq;
}

/* The vectorised Adam and AdamW update against adam_ref, bit for bit: odd
 * lengths (no multiple of the vector widths, so every loop has a tail; the
 * last above the threshold where the update runs on threads), ranges at
 * odd offsets, weight decay off, L2 (adam) and decoupled (adamw), three
 * steps at changing learning rates. */
START_TEST(test_adam_bitwise)
{
	static const size_t lens[] = {1, 3, 7, 9, 15, 17, 31, 33, 65, 127, 40001};
	struct dl_optim_config cfg[4];
	cfg[0] = dl_optim_defaults(DL_OPTIM_ADAM);
	cfg[0].weight_decay = 0;
	cfg[1] = dl_optim_defaults(DL_OPTIM_ADAM);
	cfg[1].beta1 = 0.8, cfg[1].beta2 = 0.95, cfg[1].eps = 1e-6, cfg[1].weight_decay = 0.02;
	cfg[2] = dl_optim_defaults(DL_OPTIM_ADAMW);
	cfg[2].weight_decay = 0.05;
	cfg[3] = dl_optim_defaults(DL_OPTIM_ADAMW);
	cfg[3].beta1 = 0.85, cfg[3].beta2 = 0.98, cfg[3].eps = 1e-7, cfg[3].weight_decay = 0.3;
	static const double lr[3] = {0.01, 0.003, 0.02};
	for (int k = 0; k < 4; k++)
		for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
			size_t len = lens[li], n = len + 4;
			struct dl_range r = {3, len};   /* odd offset, 1 float after */
			float *p = malloc(n * sizeof *p), *q = malloc(n * sizeof *q);
			float *g = malloc(n * sizeof *g), *m = calloc(n, sizeof *m);
			float *v = calloc(n, sizeof *v);
			ck_assert(p && q && g && m && v);
			for (size_t i = 0; i < n; i++)
				p[i] = q[i] = (float)(cos(0.61 * (double)i) * (1.0 + (double)(i % 5)));
			struct dl_optim o;
			struct dl_error err = {0};
			ck_assert_msg(dl_optim_init(&o, &cfg[k], n, &r, 1, &err) == 0, "%s", err.msg);
			for (int s = 0; s < 3; s++) {
				for (size_t i = 0; i < n; i++)   /* some tiny, some large */
					g[i] = (float)(sin(0.37 * (double)i + 1.1 * s) *
						       ((i + (size_t)s) % 7 == 0 ? 1e-6 : 1.0 + (double)(i % 3)));
				dl_optim_step(&o, p, g, lr[s]);
				for (size_t i = r.offset; i < r.offset + len; i++)
					adam_ref(&cfg[k], s + 1, lr[s], &q[i], g[i], &m[i], &v[i]);
				for (size_t i = 0; i < n; i++)
					ck_assert_msg(memcmp(&p[i], &q[i], sizeof *p) == 0,
						      "%s wd %g, length %zu, step %d: param[%zu] = %.9g, "
						      "scalar reference %.9g",
						      cfg[k].kind == DL_OPTIM_ADAMW ? "adamw" : "adam",
						      cfg[k].weight_decay, len, s + 1, i, p[i], q[i]);
				ck_assert(memcmp(o.m, m, n * sizeof *m) == 0);
				ck_assert(memcmp(o.v, v, n * sizeof *v) == 0);
			}
			dl_optim_free(&o);
			free(p);
			free(q);
			free(g);
			free(m);
			free(v);
		}
}
END_TEST

START_TEST(test_optim_config_errors)
{
	struct dl_optim o;
	struct dl_error err = {0};
	struct dl_optim_config c = dl_optim_defaults(DL_OPTIM_SGD);
	c.nesterov = 1;  /* without momentum */
	ck_assert_int_eq(dl_optim_init(&o, &c, 4, NULL, 0, &err), DL_EINPUT);
	ck_assert_msg(strstr(err.msg, "--nesterov") != NULL, "%s", err.msg);
	dl_error_clear(&err);
	c.momentum = 0.9, c.dampening = 0.1;  /* nesterov with dampening */
	ck_assert_int_eq(dl_optim_init(&o, &c, 4, NULL, 0, &err), DL_EINPUT);
	dl_error_clear(&err);
	c = dl_optim_defaults(DL_OPTIM_ADAM);
	c.beta2 = 1.0;
	ck_assert_int_eq(dl_optim_init(&o, &c, 4, NULL, 0, &err), DL_EINPUT);
	ck_assert_msg(strstr(err.msg, "--betas: beta2 1") != NULL, "%s", err.msg);
	dl_error_clear(&err);
	c = dl_optim_defaults(DL_OPTIM_ADAMW);
	ck_assert(c.weight_decay == 0.01);
	ck_assert(dl_optim_defaults(DL_OPTIM_ADAM).weight_decay == 0);
	struct dl_range out = {2, 3};
	ck_assert_int_eq(dl_optim_init(&o, &c, 4, &out, 1, &err), DL_ERUN);
	dl_error_clear(&err);
	enum dl_optim_kind k;
	ck_assert_int_eq(dl_optim_from_name("adamw", &k, &err), 0);
	ck_assert_int_eq(k, DL_OPTIM_ADAMW);
	ck_assert_int_eq(dl_optim_from_name("adan", &k, &err), DL_EINPUT);
	ck_assert_msg(strstr(err.msg, "did you mean 'adam'") != NULL, "%s",
		      err.msg);
}
END_TEST

/* ---- clipping ---- */

START_TEST(test_clip_grad_norm)
{
	static const char *const names[] = {"clip_on", "clip_off"};
	static const double max_norm[] = {1.0, 50.0};
	char buf[64];
	snprintf(buf, sizeof buf, "%s_g", names[_i]);
	float *g = load_f32(buf, NULL);
	snprintf(buf, sizeof buf, "%s_out", names[_i]);
	float *want = load_f32(buf, NULL);
	snprintf(buf, sizeof buf, "%s_norm", names[_i]);
	float *want_norm = load_f32(buf, NULL);
	float block[NBLOCK], got[NP];
	to_block(block, g, 1e3f);  /* the buffer must not count */
	double norm = dl_clip_grad_norm(block, NBLOCK, fixture_ranges, 2,
					max_norm[_i]);
	ck_assert_msg(rel_err1(norm, want_norm[0]) <= LOSS_TOL,
		      "%s: norm %.9g, PyTorch %.9g", names[_i], norm, want_norm[0]);
	memcpy(got, block, 12 * sizeof *got);
	memcpy(got + 12, block + 15, 5 * sizeof *got);
	double e = rel_err(got, want, NP);
	ck_assert_msg(e <= LOSS_TOL, "%s: gradients off by %.3g", names[_i], e);
	ck_assert(block[13] == 1e3f);
	free(g);
	free(want);
	free(want_norm);
}
END_TEST

/* ---- schedules ---- */

START_TEST(test_lr_schedules)
{
	/* as SCHEDS in tools/gen_train_fixtures.py */
	static const struct {
		const char *name;
		struct dl_lr_schedule s;
	} cases[] = {
		{"constant", {.kind = DL_LR_CONSTANT, .lr = 0.1, .total_steps = 12}},
		{"constant_warmup", {.kind = DL_LR_CONSTANT, .lr = 0.1,
				     .total_steps = 12, .warmup = 3}},
		{"step", {.kind = DL_LR_STEP, .lr = 0.1, .step_size = 4,
			  .gamma = 0.5, .total_steps = 12}},
		{"step_warmup", {.kind = DL_LR_STEP, .lr = 0.1, .step_size = 4,
				 .gamma = 0.5, .total_steps = 12, .warmup = 3}},
		{"cosine", {.kind = DL_LR_COSINE, .lr = 0.1, .min_lr = 0.01,
			    .total_steps = 12}},
		{"cosine_warmup", {.kind = DL_LR_COSINE, .lr = 0.1, .min_lr = 0.01,
				   .total_steps = 12, .warmup = 3}},
	};
	char buf[64];
	snprintf(buf, sizeof buf, "lr_%s", cases[_i].name);
	struct dl_shape s;
	float *want = load_f32(buf, &s);
	struct dl_error err = {0};
	ck_assert_msg(dl_lr_check(&cases[_i].s, &err) == 0, "%s", err.msg);
	for (int64_t t = 0; t < s.d[0]; t++) {
		double lr = dl_lr_at(&cases[_i].s, t);
		ck_assert_msg(rel_err1(lr, want[t]) <= LOSS_TOL,
			      "%s: step %lld: lr %.9g, PyTorch %.9g",
			      cases[_i].name, (long long)t, lr, want[t]);
	}
	free(want);
}
END_TEST

START_TEST(test_lr_checks)
{
	struct dl_error err = {0};
	struct dl_lr_schedule s = {.kind = DL_LR_STEP, .lr = 0.1, .gamma = 0.5,
				   .total_steps = 10};
	ck_assert_int_eq(dl_lr_check(&s, &err), DL_EINPUT);
	ck_assert_msg(strstr(err.msg, "--step-size") != NULL, "%s", err.msg);
	dl_error_clear(&err);
	s.kind = DL_LR_COSINE;
	s.total_steps = 0;
	ck_assert_int_eq(dl_lr_check(&s, &err), DL_EINPUT);
	dl_error_clear(&err);
	s.total_steps = 10;
	s.warmup = 4;
	ck_assert_int_eq(dl_lr_check(&s, &err), 0);
	/* the last warmup step reaches lr; the cosine then starts from lr */
	ck_assert(fabs(dl_lr_at(&s, 0) - 0.025) < 1e-15);
	ck_assert(fabs(dl_lr_at(&s, 3) - 0.1) < 1e-15);
	ck_assert(dl_lr_at(&s, 4) == 0.1);
	ck_assert(dl_lr_at(&s, 10) == 0.0);  /* T = 6 steps after warmup */
	ck_assert(dl_lr_at(&s, 50) == 0.0);  /* no second cycle */
	enum dl_lr_kind k;
	ck_assert_int_eq(dl_lr_from_name("cosine", &k, &err), 0);
	ck_assert_int_eq(k, DL_LR_COSINE);
	ck_assert_int_eq(dl_lr_from_name("cosin", &k, &err), DL_EINPUT);
	ck_assert_msg(strstr(err.msg, "--lr-schedule") != NULL, "%s", err.msg);
}
END_TEST

/* ---- data: one array per model input ---- */

/* Writes a float32 .npy of shape [n, a] (a 0: [n]) with values base + i. */
static void put(FILE *f, int64_t n, int64_t a, float base)
{
	int64_t d[2] = {n, a};
	struct dl_shape s = dl_shape_make(a ? 2 : 1, d);
	int64_t k = dl_shape_numel(&s);
	float *v = malloc((size_t)k * sizeof *v);
	for (int64_t i = 0; i < k; i++)
		v[i] = base + (float)i;
	struct dl_tensor t = {s, v};
	struct dl_error err = {0};
	ck_assert_int_eq(dl_npy_write(f, "tmp", &t, &err), 0);
	free(v);
}

/* Two inputs x [3] and adj [2], float targets [n, 1]: per step x, adj, y. */
static const struct dl_input_spec two_inputs[2] = {
	{.name = "x", .ndim = 1, .d = {3}},
	{.name = "adj", .ndim = 1, .d = {2}},
};

START_TEST(test_stream_two_inputs)
{
	FILE *f = tmpfile();
	ck_assert_ptr_nonnull(f);
	put(f, 2, 3, 0);      /* step 1 */
	put(f, 2, 2, 100);
	put(f, 2, 1, 200);
	put(f, 1, 3, 10);     /* step 2: one sample */
	put(f, 1, 2, 110);
	put(f, 1, 1, 210);
	rewind(f);
	struct dl_data_spec spec = {2, two_inputs, 0};
	struct dl_dataset d, v;
	struct dl_error err = {0};
	ck_assert_msg(dl_dataset_load_stream(&d, f, &spec, &err) == 0, "%s", err.msg);
	fclose(f);
	ck_assert_int_eq(d.n, 3);
	ck_assert_int_eq(d.steps, 2);
	ck_assert_int_eq(d.n_x, 2);
	ck_assert_int_eq(d.x[0].shape.d[0], 3);
	ck_assert_int_eq(d.x[1].shape.d[1], 2);
	ck_assert(d.x[0].f[6] == 10 && d.x[1].f[4] == 110 && d.y.f[2] == 210);
	/* the last third moves to the validation set, every array alike */
	ck_assert_int_eq(dl_dataset_split(&d, &v, 1.0 / 3, &err), 0);
	ck_assert_int_eq(d.n, 2);
	ck_assert_int_eq(v.n, 1);
	ck_assert(v.x[0].f[0] == 10 && v.x[1].f[1] == 111 && v.y.f[0] == 210);
	ck_assert_int_eq(v.x[1].shape.d[0], 1);
	dl_dataset_free(&d);
	dl_dataset_free(&v);
	dl_dataset_free(NULL);
}
END_TEST

START_TEST(test_stream_errors)
{
	struct dl_data_spec spec = {2, two_inputs, 0};
	struct dl_dataset d;
	struct dl_error err = {0};
	/* ends after x: names adj */
	FILE *f = tmpfile();
	put(f, 2, 3, 0);
	rewind(f);
	ck_assert_int_eq(dl_dataset_load_stream(&d, f, &spec, &err), DL_EINPUT);
	ck_assert_msg(strstr(err.msg, "'adj'") != NULL, "%s", err.msg);
	fclose(f);
	/* adj of the wrong per-sample shape: both shapes named */
	dl_error_clear(&err);
	f = tmpfile();
	put(f, 2, 3, 0);
	put(f, 2, 4, 0);
	put(f, 2, 1, 0);
	rewind(f);
	ck_assert_int_eq(dl_dataset_load_stream(&d, f, &spec, &err), DL_EINPUT);
	ck_assert_msg(strstr(err.msg, "adj") && strstr(err.msg, "[4]") && strstr(err.msg, "[2]"),
		      "%s", err.msg);
	fclose(f);
	/* adj with other sample count than x */
	dl_error_clear(&err);
	f = tmpfile();
	put(f, 2, 3, 0);
	put(f, 3, 2, 0);
	put(f, 2, 1, 0);
	rewind(f);
	ck_assert_int_eq(dl_dataset_load_stream(&d, f, &spec, &err), DL_EINPUT);
	ck_assert_msg(strstr(err.msg, "3 samples") != NULL, "%s", err.msg);
	fclose(f);
}
END_TEST

Suite *make_train_suite(void)
{
	Suite *s = suite_create("train");
	TCase *tc = tcase_create("loss");
	tcase_add_test(tc, test_ce_2d);
	tcase_add_test(tc, test_ce_3d);
	tcase_add_test(tc, test_nll);
	tcase_add_test(tc, test_mse);
	tcase_add_test(tc, test_bce_with_logits);
	tcase_add_test(tc, test_ce_all_ignored);
	tcase_add_test(tc, test_ce_extreme_logits);
	tcase_add_test(tc, test_loss_finite_differences);
	tcase_add_test(tc, test_loss_thread_independent);
	tcase_add_test(tc, test_check_labels);
	tcase_add_test(tc, test_loss_shapes);
	tcase_add_test(tc, test_loss_names);
	tcase_add_test(tc, test_accuracy);
	suite_add_tcase(s, tc);

	tc = tcase_create("optim");
	tcase_add_loop_test(tc, test_optim_parity, 0, 5);
	tcase_add_loop_test(tc, test_optim_state_round_trip, 0, 5);
	tcase_add_test(tc, test_adam_bitwise);
	tcase_add_test(tc, test_optim_config_errors);
	tcase_add_loop_test(tc, test_clip_grad_norm, 0, 2);
	tcase_add_loop_test(tc, test_lr_schedules, 0, 6);
	tcase_add_test(tc, test_lr_checks);
	suite_add_tcase(s, tc);

	tc = tcase_create("data");
	tcase_add_test(tc, test_stream_two_inputs);
	tcase_add_test(tc, test_stream_errors);
	suite_add_tcase(s, tc);
	return s;
}
