/* The core ops (linear, elementwise, activation, shape, reduce, dropout):
 * central finite-difference checks of every backward, hand-checked forward
 * values where the semantics are subtle, zero-sample batches, and located
 * errors from shape inference. Nodes are set up by hand, without a graph. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "engine/op.h"
#include "engine/rng.h"
#include "model/hparams.h"
#include "ops/registry.h"

#define MAX_IN 4

/* SHAPE(2, 3, 4) initialises the shape [2, 3, 4]; SH(2, 3, 4) is one */
#define SHAPE(...) {.ndim = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
		    .d = {__VA_ARGS__}}
#define SH(...) ((struct dl_shape)SHAPE(__VA_ARGS__))

/* One node with its buffers, run without a graph. */
struct rig {
	struct dl_node n;
	int n_in;
	struct dl_tensor in[MAX_IN];
	struct dl_tensor out;
	float *din[MAX_IN];
	void *ws, *saved;
	struct dl_rng rng;
	struct dl_ctx ctx;
};

static float *alloc_floats(int64_t count)
{
	float *p = calloc((size_t)(count > 0 ? count : 1), sizeof *p);
	ck_assert_ptr_nonnull(p);
	return p;
}

/* Sets up op with hps on inputs of the given shapes and runs infer; the
 * entry sits at t.yaml:7:3. Returns infer's code. */
static int rig_infer(struct rig *r, const char *op, const char *hps, int n_in,
		     const struct dl_shape *shapes, struct dl_error *err)
{
	memset(r, 0, sizeof *r);
	dl_error_clear(err);
	const struct dl_op_desc *d = dl_op_find(op);
	ck_assert_msg(d != NULL, "op %s is not registered", op);
	int rc = dl_node_setup(&r->n, d, hps, err);
	ck_assert_msg(rc == 0, "%s {%s}: setup: %s", op, hps, err->msg);
	r->n.file = "t.yaml";
	r->n.line = 7;
	r->n.col = 3;
	r->n.n_in = n_in;
	r->n_in = n_in;
	for (int k = 0; k < n_in; k++)
		r->in[k].shape = shapes[k];
	return d->infer(&r->n, shapes, &r->out.shape, err);
}

/* Buffers for a rig whose infer succeeded: inputs and parameters U(-1, 1)
 * (|x| >= away when away > 0, shifted by shift), gradients zero. */
static void rig_alloc(struct rig *r, int train, double away, double shift)
{
	dl_rng_seed(&r->rng, 1234);
	for (int k = 0; k < r->n_in; k++) {
		int64_t len = dl_shape_numel(&r->in[k].shape);
		r->in[k].data = alloc_floats(len);
		r->din[k] = alloc_floats(len);
		for (int64_t i = 0; i < len; i++) {
			double u = 2.0 * dl_rng_uniform(&r->rng) - 1.0;
			if (away > 0)
				u = (u < 0 ? -1.0 : 1.0) * (away + fabs(u));
			r->in[k].data[i] = (float)(u + shift);
		}
	}
	for (int k = 0; k < r->n.n_params; k++) {
		struct dl_param *p = &r->n.params[k];
		int64_t len = dl_shape_numel(&p->shape);
		p->data = alloc_floats(len);
		p->grad = alloc_floats(len);
		for (int64_t i = 0; i < len; i++)
			p->data[i] = (float)(2.0 * dl_rng_uniform(&r->rng) - 1.0);
	}
	r->out.data = alloc_floats(dl_shape_numel(&r->out.shape));
	r->ws = malloc(r->n.ws_bytes + 16);
	r->saved = train ? malloc(r->n.saved_bytes + 16) : NULL;
	r->ctx.ws = r->ws;
	r->ctx.saved = r->saved;
	r->ctx.train = train;
	r->ctx.rng = &r->rng;
}

static void rig_free(struct rig *r)
{
	for (int k = 0; k < r->n_in; k++) {
		free(r->in[k].data);
		free(r->din[k]);
	}
	for (int k = 0; k < r->n.n_params; k++) {
		free(r->n.params[k].data);
		free(r->n.params[k].grad);
	}
	free(r->out.data);
	free(r->ws);
	free(r->saved);
	dl_node_release(&r->n);
}

/* Forward with the dropout stream restarted, so every call draws the same
 * masks; returns sum(out * proj) in double. */
static double rig_loss(struct rig *r, const float *proj)
{
	dl_rng_seed(&r->rng, 99);
	r->n.op->forward(&r->n, r->in, &r->out, &r->ctx);
	double l = 0;
	int64_t len = dl_shape_numel(&r->out.shape);
	for (int64_t i = 0; i < len; i++)
		l += (double)r->out.data[i] * proj[i];
	return l;
}

/* ---- finite differences ---- */

struct gcase {
	const char *op, *hps;
	int n_in;
	struct dl_shape in[MAX_IN];
	int train;
	double away, shift; /* keep inputs off kinks: |x - shift| >= away */
};

#define H 1e-2
#define PRE 0.25f      /* gradients start here: backward must add */
#define PROBES 48      /* elements probed per tensor (all when fewer) */

/* Compares analytic (minus PRE) with central differences of x's elements. */
static void probe(struct rig *r, const struct gcase *c, const char *what,
		  float *x, const float *grad, int64_t len, const float *proj)
{
	struct dl_rng pick;
	dl_rng_seed(&pick, 7);
	int64_t count = len < PROBES ? len : PROBES;
	for (int64_t t = 0; t < count; t++) {
		int64_t i = len <= PROBES ? t : (int64_t)dl_rng_below(&pick, (uint64_t)len);
		float v = x[i];
		x[i] = (float)(v + H);
		double lp = rig_loss(r, proj);
		x[i] = (float)(v - H);
		double lm = rig_loss(r, proj);
		x[i] = v;
		double num = (lp - lm) / (2 * H);
		double ana = (double)grad[i] - PRE;
		double scale = fmax(fmax(fabs(num), fabs(ana)), 0.1);
		ck_assert_msg(fabs(num - ana) <= 1e-2 * scale,
			      "%s {%s}: %s[%lld]: backward %.6g, finite difference %.6g",
			      c->op, c->hps, what, (long long)i, ana, num);
	}
}

static void gradcheck(const struct gcase *c)
{
	struct rig r;
	struct dl_error err;
	int rc = rig_infer(&r, c->op, c->hps, c->n_in, c->in, &err);
	ck_assert_msg(rc == 0, "%s {%s}: infer: %s", c->op, c->hps, err.msg);
	ck_assert_ptr_nonnull(r.n.op->backward);
	rig_alloc(&r, c->train, c->away, c->shift);
	int64_t olen = dl_shape_numel(&r.out.shape);
	float *proj = alloc_floats(olen);
	for (int64_t i = 0; i < olen; i++)
		proj[i] = (float)(2.0 * dl_rng_uniform(&r.rng) - 1.0);

	rig_loss(&r, proj);
	for (int k = 0; k < r.n_in; k++)
		for (int64_t i = 0; i < dl_shape_numel(&r.in[k].shape); i++)
			r.din[k][i] = PRE;
	for (int k = 0; k < r.n.n_params; k++)
		for (int64_t i = 0; i < dl_shape_numel(&r.n.params[k].shape); i++)
			r.n.params[k].grad[i] = PRE;
	r.n.op->backward(&r.n, r.in, &r.out, proj, r.din, &r.ctx);

	for (int k = 0; k < r.n_in; k++) {
		char what[32];
		snprintf(what, sizeof what, "input %d", k + 1);
		probe(&r, c, what, r.in[k].data, r.din[k],
		      dl_shape_numel(&r.in[k].shape), proj);
	}
	for (int k = 0; k < r.n.n_params; k++)
		probe(&r, c, r.n.params[k].name, r.n.params[k].data,
		      r.n.params[k].grad, dl_shape_numel(&r.n.params[k].shape),
		      proj);

	/* no input gradients wanted: must not touch anything */
	float *none[MAX_IN] = {NULL, NULL, NULL, NULL};
	r.n.op->backward(&r.n, r.in, &r.out, proj, none, &r.ctx);
	free(proj);
	rig_free(&r);
}

/* The same op on a batch of zero samples: infer, forward and backward
 * succeed and the output has zero samples. With keep_ones, inputs of batch
 * 1 stay 1 (they broadcast against the others' 0). */
static void zero_batch_run(const struct gcase *c, int keep_ones)
{
	struct dl_shape in[MAX_IN];
	for (int k = 0; k < c->n_in; k++) {
		in[k] = c->in[k];
		if (!keep_ones || k == 0 || in[k].d[0] != 1)
			in[k].d[0] = 0;
	}
	struct rig r;
	struct dl_error err;
	int rc = rig_infer(&r, c->op, c->hps, c->n_in, in, &err);
	ck_assert_msg(rc == 0, "%s {%s} with N = 0: infer: %s", c->op, c->hps, err.msg);
	ck_assert_msg(r.out.shape.d[0] == 0, "%s {%s} with N = 0: output batch %lld",
		      c->op, c->hps, (long long)r.out.shape.d[0]);
	rig_alloc(&r, c->train, 0, 0);
	r.n.op->forward(&r.n, r.in, &r.out, &r.ctx);
	r.n.op->backward(&r.n, r.in, &r.out, r.out.data, r.din, &r.ctx);
	rig_free(&r);
}

static void zero_batch(const struct gcase *c)
{
	zero_batch_run(c, 0);
	if (c->n_in > 1 && strcmp(c->op, "concat") != 0)
		zero_batch_run(c, 1);
}

static const struct gcase linear_cases[] = {
	{"linear", "out_features: 5", 1, {SHAPE(3, 7)}, 0, 0, 0},
	{"linear", "out_features: 4, bias: false, in_features: 6", 1, {SHAPE(1, 2, 3, 6)}, 0, 0, 0},
	{"linear", "out_features: 1", 1, {SHAPE(2, 5, 1)}, 0, 0, 0},
	{"matmul", "", 2, {SHAPE(2, 3, 4), SHAPE(2, 4, 5)}, 0, 0, 0},
	{"matmul", "", 2, {SHAPE(3, 2, 3, 4), SHAPE(1, 4, 5)}, 0, 0, 0},
	{"matmul", "", 2, {SHAPE(1, 3, 1, 4), SHAPE(2, 1, 4, 3)}, 0, 0, 0},
	{"matmul", "", 2, {SHAPE(2, 2, 1, 3, 2), SHAPE(2, 3, 2, 1)}, 0, 0, 0},
};

static const struct gcase elementwise_cases[] = {
	{"add", "", 2, {SHAPE(2, 3, 4), SHAPE(2, 3, 4)}, 0, 0, 0},
	{"add", "", 2, {SHAPE(3, 4, 5), SHAPE(3, 5)}, 0, 0, 0},
	{"add", "", 3, {SHAPE(2, 3, 5), SHAPE(2, 5), SHAPE(1, 3, 1)}, 0, 0, 0},
	{"add", "", 2, {SHAPE(4, 90, 100), SHAPE(4, 100)}, 0, 0, 0},
	{"mul", "", 2, {SHAPE(2, 3, 4, 5), SHAPE(2, 3, 1, 1)}, 0, 0, 0},
	{"mul", "", 3, {SHAPE(2, 3), SHAPE(1, 3), SHAPE(2, 1)}, 0, 0, 0},
	{"mul", "", 2, {SHAPE(1, 5), SHAPE(3, 4, 1)}, 0, 0, 0},
	{"mul", "", 2, {SHAPE(4, 90, 100), SHAPE(4, 90, 100)}, 0, 0, 0},
	{"sub", "", 2, {SHAPE(1, 4, 3), SHAPE(2, 3)}, 0, 0, 0},
	{"sub", "", 2, {SHAPE(2, 1, 3), SHAPE(2, 5, 1)}, 0, 0, 0},
	{"div", "", 2, {SHAPE(2, 3, 4), SHAPE(2, 4)}, 0, 0.5, 0},
	{"div", "", 2, {SHAPE(3, 1), SHAPE(1, 2, 7)}, 0, 0.5, 0},
};

static const struct gcase activation_cases[] = {
	{"relu", "", 1, {SHAPE(3, 5, 7)}, 0, 0.05, 0},
	{"relu", "", 1, {SHAPE(4, 100, 100)}, 0, 0.05, 0},
	{"leaky_relu", "negative_slope: 0.2", 1, {SHAPE(1, 13)}, 0, 0.05, 0},
	{"leaky_relu", "", 1, {SHAPE(3, 5, 7)}, 0, 0.05, 0},
	{"tanh", "", 1, {SHAPE(3, 5, 7)}, 0, 0, 0},
	{"sigmoid", "", 1, {SHAPE(1, 13)}, 0, 0, 0},
	{"gelu", "", 1, {SHAPE(3, 5, 7)}, 0, 0, 0},
	{"gelu", "approximate: tanh", 1, {SHAPE(1, 13)}, 0, 0, 0},
	{"silu", "", 1, {SHAPE(3, 5, 7)}, 0, 0, 0},
	{"softplus", "", 1, {SHAPE(1, 13)}, 0, 0, 0},
	{"softplus", "beta: 4, threshold: 2", 1, {SHAPE(3, 5, 7)}, 0, 0.1, 0.5},
	{"relu_squared", "", 1, {SHAPE(3, 5, 7)}, 0, 0.05, 0},
	{"softmax", "", 1, {SHAPE(1, 7)}, 0, 0, 0},
	{"softmax", "dim: 1", 1, {SHAPE(2, 5, 3)}, 0, 0, 0},
	{"softmax", "dim: -2", 1, {SHAPE(2, 3, 4, 2)}, 0, 0, 0},
	{"log_softmax", "", 1, {SHAPE(3, 6)}, 0, 0, 0},
	{"log_softmax", "dim: -2", 1, {SHAPE(2, 5, 3)}, 0, 0, 0},
	{"log_softmax", "", 1, {SHAPE(2, 37)}, 0, 0, 0},
	{"log_softmax", "dim: 1", 1, {SHAPE(2, 3, 67)}, 0, 0, 0},
	{"softmax", "dim: 1", 1, {SHAPE(1, 4, 66)}, 0, 0, 0},
	/* the backward's float lanes along the last dimension (16 and a
	 * tail) and its blocks of 64 columns before it (two and a tail) */
	{"softmax", "", 1, {SHAPE(2, 37)}, 0, 0, 0},
	{"softmax", "dim: 1", 1, {SHAPE(2, 5, 130)}, 0, 0, 0},
	{"log_softmax", "dim: -2", 1, {SHAPE(1, 3, 129)}, 0, 0, 0},
};

static const struct gcase shape_cases[] = {
	{"identity", "", 1, {SHAPE(2, 3)}, 0, 0, 0},
	{"flatten", "", 1, {SHAPE(2, 3, 4, 5)}, 0, 0, 0},
	{"flatten", "start_dim: 2, end_dim: -2", 1, {SHAPE(1, 3, 4, 5, 2)}, 0, 0, 0},
	{"reshape", "shape: [5, -1]", 1, {SHAPE(2, 3, 10)}, 0, 0, 0},
	{"reshape", "shape: 12", 1, {SHAPE(1, 3, 4)}, 0, 0, 0},
	{"permute", "dims: [0, 3, 1, 2]", 1, {SHAPE(2, 3, 4, 5)}, 0, 0, 0},
	{"permute", "dims: [0, -1, 1]", 1, {SHAPE(1, 4, 3)}, 0, 0, 0},
	{"transpose", "dim0: 1, dim1: -1", 1, {SHAPE(2, 3, 4, 5)}, 0, 0, 0},
	{"transpose", "dim0: -1, dim1: -2", 1, {SHAPE(1, 3, 5)}, 0, 0, 0},
	{"slice", "dim: -1, start: -7, end: 100, step: 2", 1, {SHAPE(2, 3, 9)}, 0, 0, 0},
	{"slice", "dim: 1, start: 1", 1, {SHAPE(1, 4, 2)}, 0, 0, 0},
	{"slice", "dim: 2, start: -100, end: -1, step: 3", 1, {SHAPE(3, 2, 8, 2)}, 0, 0, 0},
	{"pad", "padding: [1, 2, -1, 3], value: 0.5", 1, {SHAPE(2, 3, 4, 5)}, 0, 0, 0},
	{"pad", "padding: [-2, 1]", 1, {SHAPE(1, 6)}, 0, 0, 0},
	{"pad", "padding: [0, 0, 2, -3, 1, 1]", 1, {SHAPE(2, 3, 4, 2)}, 0, 0, 0},
	{"concat", "dim: -1", 3, {SHAPE(2, 3, 2), SHAPE(2, 3, 4), SHAPE(2, 3, 1)}, 0, 0, 0},
	{"concat", "", 2, {SHAPE(1, 2, 3), SHAPE(1, 4, 3)}, 0, 0, 0},
};

static const struct gcase reduce_cases[] = {
	{"mean", "dim: -1", 1, {SHAPE(2, 3, 5)}, 0, 0, 0},
	{"mean", "dim: [1, 3], keepdim: true", 1, {SHAPE(2, 3, 4, 5)}, 0, 0, 0},
	{"mean", "dim: 2", 1, {SHAPE(1, 3, 4, 2)}, 0, 0, 0},
	{"mean", "dim: [-1, 1, 2]", 1, {SHAPE(3, 2, 3, 2)}, 0, 0, 0},
	{"sum", "dim: -1", 1, {SHAPE(2, 3, 5)}, 0, 0, 0},
	{"sum", "dim: [3, 1], keepdim: true", 1, {SHAPE(1, 3, 4, 5)}, 0, 0, 0},
};

static const struct gcase dropout_cases[] = {
	{"dropout", "p: 0.3", 1, {SHAPE(3, 4, 5)}, 1, 0, 0},
	{"dropout", "", 1, {SHAPE(1, 9)}, 1, 0, 0},
	{"dropout", "p: 0.3", 1, {SHAPE(3, 4, 5)}, 0, 0, 0},
	{"dropout2d", "p: 0.4", 1, {SHAPE(2, 6, 3, 3)}, 1, 0, 0},
	{"dropout2d", "", 1, {SHAPE(1, 5, 7)}, 1, 0, 0},
	{"dropout2d", "", 1, {SHAPE(2, 3, 2, 2)}, 0, 0, 0},
	{"drop_path", "p: 0.4", 1, {SHAPE(6, 3, 4)}, 1, 0, 0},
	{"drop_path", "", 1, {SHAPE(1, 7)}, 1, 0, 0},
	{"drop_path", "p: 0.2", 1, {SHAPE(3, 2, 2, 2)}, 0, 0, 0},
};

#define RUN_CASES(cases, fn) \
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) \
		fn(&cases[i])

START_TEST(grad_linear) { RUN_CASES(linear_cases, gradcheck); }
END_TEST
START_TEST(grad_elementwise) { RUN_CASES(elementwise_cases, gradcheck); }
END_TEST
START_TEST(grad_activation) { RUN_CASES(activation_cases, gradcheck); }
END_TEST
START_TEST(grad_shape) { RUN_CASES(shape_cases, gradcheck); }
END_TEST
START_TEST(grad_reduce) { RUN_CASES(reduce_cases, gradcheck); }
END_TEST
START_TEST(grad_dropout) { RUN_CASES(dropout_cases, gradcheck); }
END_TEST

START_TEST(zero_samples)
{
	RUN_CASES(linear_cases, zero_batch);
	RUN_CASES(elementwise_cases, zero_batch);
	RUN_CASES(activation_cases, zero_batch);
	RUN_CASES(shape_cases, zero_batch);
	RUN_CASES(reduce_cases, zero_batch);
	RUN_CASES(dropout_cases, zero_batch);
}
END_TEST

/* ---- forward values ---- */

/* Runs op on inputs given as arrays; returns the rig (caller frees) after
 * checking the output shape. */
static void run_values(struct rig *r, const char *op, const char *hps, int n_in,
		       const struct dl_shape *shapes, const float *const *vals,
		       struct dl_shape want, int train)
{
	struct dl_error err;
	int rc = rig_infer(r, op, hps, n_in, shapes, &err);
	ck_assert_msg(rc == 0, "%s {%s}: %s", op, hps, err.msg);
	char a[128], b[128];
	ck_assert_msg(dl_shape_equal(&r->out.shape, &want),
		      "%s {%s}: output shape %s, expected %s", op, hps,
		      dl_shape_str(&r->out.shape, a, sizeof a),
		      dl_shape_str(&want, b, sizeof b));
	rig_alloc(r, train, 0, 0);
	for (int k = 0; k < n_in; k++)
		memcpy(r->in[k].data, vals[k],
		       (size_t)dl_shape_numel(&shapes[k]) * sizeof(float));
	r->n.op->forward(&r->n, r->in, &r->out, &r->ctx);
}

static void expect_values(const struct rig *r, const float *want, double tol)
{
	int64_t len = dl_shape_numel(&r->out.shape);
	for (int64_t i = 0; i < len; i++)
		ck_assert_msg(fabs((double)r->out.data[i] - want[i]) <= tol,
			      "%s: out[%lld] = %.9g, expected %.9g", r->n.op->name,
			      (long long)i, r->out.data[i], want[i]);
}

static void check_values(const char *op, const char *hps, int n_in,
			 const struct dl_shape *shapes, const float *const *vals,
			 struct dl_shape want_shape, const float *want, double tol)
{
	struct rig r;
	run_values(&r, op, hps, n_in, shapes, vals, want_shape, 0);
	expect_values(&r, want, tol);
	rig_free(&r);
}

static const float ramp[64] = {
	0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
	20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37,
	38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55,
	56, 57, 58, 59, 60, 61, 62, 63,
};

START_TEST(values_slice)
{
	struct dl_shape in = SH(1, 10);
	const float *v[] = {ramp};
	check_values("slice", "dim: 1, start: -3, end: 100", 1, &in, v, SH(1, 3),
		     (const float[]){7, 8, 9}, 0);
	check_values("slice", "dim: -1, start: -100, end: 3, step: 2", 1, &in, v,
		     SH(1, 2), (const float[]){0, 2}, 0);
	check_values("slice", "dim: 1, start: 8, end: -1", 1, &in, v, SH(1, 1),
		     (const float[]){8}, 0);
	check_values("slice", "dim: 1, start: 5, end: 2", 1, &in, v, SH(1, 0),
		     (const float[]){0}, 0);
	check_values("slice", "dim: 1, start: 1, end: null, step: 4", 1, &in, v,
		     SH(1, 3), (const float[]){1, 5, 9}, 0);
	/* a middle dimension: [2, 3, 2] rows 1.. of dim 1 */
	struct dl_shape in3 = SH(2, 3, 2);
	check_values("slice", "dim: 1, start: 1", 1, &in3, v, SH(2, 2, 2),
		     (const float[]){2, 3, 4, 5, 8, 9, 10, 11}, 0);
}
END_TEST

START_TEST(values_pad)
{
	struct dl_shape in = SH(1, 6);
	const float *v[] = {ramp};
	check_values("pad", "padding: [-4, 2]", 1, &in, v, SH(1, 4),
		     (const float[]){4, 5, 0, 0}, 0);
	check_values("pad", "padding: [-3, -3]", 1, &in, v, SH(1, 0),
		     (const float[]){0}, 0);
	/* [1, 2, 3]: last dim (1 before, crop 1 after), then one row after */
	struct dl_shape in2 = SH(1, 2, 3);
	check_values("pad", "padding: [1, -1, 0, 1], value: 9", 1, &in2, v,
		     SH(1, 3, 3), (const float[]){9, 0, 1, 9, 3, 4, 9, 9, 9}, 0);
	/* negative padding of the second dimension crops its first row */
	check_values("pad", "padding: [0, 0, -1, 0]", 1, &in2, v, SH(1, 1, 3),
		     (const float[]){3, 4, 5}, 0);
}
END_TEST

START_TEST(values_permute)
{
	struct dl_shape in = SH(2, 3, 4);
	const float *v[] = {ramp};
	float want[24];
	for (int n = 0; n < 2; n++)
		for (int i = 0; i < 4; i++)
			for (int j = 0; j < 3; j++)
				want[n * 12 + i * 3 + j] = ramp[n * 12 + j * 4 + i];
	check_values("permute", "dims: [0, 2, 1]", 1, &in, v, SH(2, 4, 3), want, 0);
	check_values("transpose", "dim0: -1, dim1: 1", 1, &in, v, SH(2, 4, 3), want, 0);
	/* [1, 2, 3, 4] -> dims [0, 3, 1, 2]: out[0, l, i, k] = x[0, i, k, l] */
	struct dl_shape in4 = SH(1, 2, 3, 4);
	for (int l = 0; l < 4; l++)
		for (int i = 0; i < 2; i++)
			for (int k = 0; k < 3; k++)
				want[l * 6 + i * 3 + k] = ramp[i * 12 + k * 4 + l];
	check_values("permute", "dims: [0, 3, 1, 2]", 1, &in4, v, SH(1, 4, 2, 3), want, 0);
}
END_TEST

START_TEST(values_broadcast)
{
	/* [N, T, D] + [N, D]: each sample's vector added at every step */
	struct dl_shape s[] = {SH(2, 3, 2), SH(2, 2)};
	const float b[] = {100, 200, 300, 400};
	const float *v[] = {ramp, b};
	check_values("add", "", 2, s, v, SH(2, 3, 2),
		     (const float[]){100, 201, 102, 203, 104, 205,
				     306, 407, 308, 409, 310, 411}, 0);
	/* [N, C, H, W] * [N, C, 1, 1]: per-channel scale */
	struct dl_shape s2[] = {SH(2, 2, 1, 2), SH(2, 2, 1, 1)};
	const float c[] = {1, -1, 10, 0};
	const float *v2[] = {ramp, c};
	check_values("mul", "", 2, s2, v2, SH(2, 2, 1, 2),
		     (const float[]){0, 1, -2, -3, 40, 50, 0, 0}, 0);
	/* batch 1 against batch 2, and sub / div order */
	struct dl_shape s3[] = {SH(1, 2), SH(2, 1)};
	const float d[] = {2, 4};
	const float *v3[] = {c, d};
	check_values("sub", "", 2, s3, v3, SH(2, 2), (const float[]){-1, -3, -3, -5}, 0);
	check_values("div", "", 2, s3, v3, SH(2, 2),
		     (const float[]){0.5f, -0.5f, 0.25f, -0.25f}, 0);
	/* three inputs */
	struct dl_shape s4[] = {SH(1, 2), SH(2, 1), SH(1, 1)};
	const float e[] = {1000};
	const float *v4[] = {c, d, e};
	check_values("add", "", 3, s4, v4, SH(2, 2), (const float[]){1003, 1001, 1005, 1003}, 0);
}
END_TEST

START_TEST(values_activation)
{
	struct dl_shape in = SH(1, 5);
	const float x[] = {-2.0f, -0.5f, 0.0f, 0.7f, 3.0f};
	const float *v[] = {x};
	/* torch.nn.functional.gelu(x, approximate='tanh') and exact, float32 */
	check_values("gelu", "approximate: tanh", 1, &in, v, in,
		     (const float[]){-0.04540228843688965f, -0.1542859971523285f,
				     0.0f, 0.5305701494216919f, 2.9963626861572266f},
		     2e-6);
	check_values("gelu", "", 1, &in, v, in,
		     (const float[]){-0.045500099658966064f, -0.1542687863111496f,
				     0.0f, 0.5306254625320435f, 2.995950222015381f},
		     2e-6);
	check_values("silu", "", 1, &in, v, in,
		     (const float[]){-0.23840583860874176f, -0.1887703388929367f,
				     0.0f, 0.46773141622543335f, 2.857722520828247f},
		     2e-6);
	check_values("leaky_relu", "negative_slope: -0.5", 1, &in, v, in,
		     (const float[]){1.0f, 0.25f, 0.0f, 0.7f, 3.0f}, 0);
	check_values("relu_squared", "", 1, &in, v, in,
		     (const float[]){0, 0, 0, 0.49f, 9.0f}, 1e-6);
	/* softplus is linear above threshold / beta */
	struct dl_shape in3 = SH(1, 3);
	const float y[] = {25.0f, 0.0f, -1.0f};
	const float *w[] = {y};
	check_values("softplus", "", 1, &in3, w, in3,
		     (const float[]){25.0f, 0.6931471824645996f, 0.3132616877555847f}, 1e-6);
	check_values("softplus", "beta: 2, threshold: 1", 1, &in3, w, in3,
		     (const float[]){25.0f, 0.34657359f, 0.06346479f}, 1e-6);
	/* softmax of [1, 2, 3] along dim 1 of [1, 3, 1]; large values stay finite */
	struct dl_shape s = SH(1, 3, 1);
	const float z[] = {1001, 1002, 1003};
	const float *u[] = {z};
	check_values("softmax", "dim: 1", 1, &s, u, s,
		     (const float[]){0.09003057f, 0.24472847f, 0.66524096f}, 1e-6);
	check_values("log_softmax", "dim: -2", 1, &s, u, s,
		     (const float[]){-2.40760596f, -1.40760596f, -0.40760596f}, 1e-6);
}
END_TEST

START_TEST(values_linear_matmul)
{
	/* y = x W^T + b with W = [[1, 2, 3], [4, 5, 6]], b = [10, 20] */
	struct rig r;
	struct dl_shape in = SH(2, 3);
	const float x[] = {1, 0, -1, 2, 1, 0};
	const float *v[] = {x};
	run_values(&r, "linear", "out_features: 2", 1, &in, v, SH(2, 2), 0);
	ck_assert_int_eq(r.n.n_params, 2);
	ck_assert_str_eq(r.n.params[0].name, "weight");
	ck_assert_int_eq(r.n.params[0].init, DL_INIT_UNIFORM);
	ck_assert(fabs(r.n.params[0].init_arg - 1 / sqrt(3.0)) < 1e-12);
	const float W[] = {1, 2, 3, 4, 5, 6}, B[] = {10, 20};
	memcpy(r.n.params[0].data, W, sizeof W);
	memcpy(r.n.params[1].data, B, sizeof B);
	r.n.op->forward(&r.n, r.in, &r.out, &r.ctx);
	expect_values(&r, (const float[]){8, 18, 14, 33}, 0);
	ck_assert_int_eq(r.n.macs, 2 * 3 * 2);
	rig_free(&r);

	struct dl_shape s[] = {SH(1, 2, 2), SH(2, 2, 2)};
	const float a[] = {1, 2, 3, 4}, b[] = {5, 6, 7, 8, 1, 0, 0, 1};
	const float *m[] = {a, b};
	check_values("matmul", "", 2, s, m, SH(2, 2, 2),
		     (const float[]){19, 22, 43, 50, 1, 2, 3, 4}, 0);
}
END_TEST

START_TEST(values_mean_concat_reshape)
{
	struct dl_shape in = SH(2, 2, 3);
	const float *v[] = {ramp};
	check_values("mean", "dim: -1, keepdim: true", 1, &in, v, SH(2, 2, 1),
		     (const float[]){1, 4, 7, 10}, 1e-6);
	check_values("mean", "dim: [1, 2]", 1, &in, v, SH(2),
		     (const float[]){2.5f, 8.5f}, 1e-6);
	check_values("mean", "dim: 1", 1, &in, v, SH(2, 3),
		     (const float[]){1.5f, 2.5f, 3.5f, 7.5f, 8.5f, 9.5f}, 1e-6);
	struct dl_shape s[] = {SH(2, 1, 2), SH(2, 1, 1)};
	const float b[] = {100, 200};
	const float *c[] = {ramp, b};
	check_values("concat", "dim: -1", 2, s, c, SH(2, 1, 3),
		     (const float[]){0, 1, 100, 2, 3, 200}, 0);
	check_values("reshape", "shape: [-1, 2]", 1, &in, v, SH(2, 3, 2), ramp, 0);
	check_values("flatten", "", 1, &in, v, SH(2, 6), ramp, 0);
}
END_TEST

START_TEST(values_dropout)
{
	enum { LEN = 20000 };
	struct dl_shape in = SH(4, LEN / 4);
	float *x = malloc(LEN * sizeof *x);
	for (int i = 0; i < LEN; i++)
		x[i] = 1.0f + (float)(i % 7);
	const float *v[] = {x};
	struct rig r;
	/* inference: the identity */
	run_values(&r, "dropout", "p: 0.5", 1, &in, v, in, 0);
	expect_values(&r, x, 0);
	rig_free(&r);
	/* training: each element 0 or x / (1 - p), about p of them 0 */
	run_values(&r, "dropout", "p: 0.25", 1, &in, v, in, 1);
	int zeros = 0;
	for (int i = 0; i < LEN; i++) {
		if (r.out.data[i] == 0.0f)
			zeros++;
		else
			ck_assert_float_eq_tol(r.out.data[i], x[i] / 0.75f, 1e-5);
	}
	ck_assert_msg(zeros > LEN * 0.22 && zeros < LEN * 0.28, "%d zeros", zeros);
	rig_free(&r);
	/* p = 1: all zeros */
	run_values(&r, "dropout", "p: 1", 1, &in, v, in, 1);
	for (int i = 0; i < LEN; i++)
		ck_assert(r.out.data[i] == 0.0f);
	rig_free(&r);
	/* dropout2d: whole channels */
	struct dl_shape in4 = SH(4, 50, 10, 10);
	run_values(&r, "dropout2d", "", 1, &in4, v, in4, 1);
	int dropped = 0;
	for (int c = 0; c < 200; c++) {
		int z = r.out.data[c * 100] == 0.0f;
		dropped += z;
		for (int j = 0; j < 100; j++)
			ck_assert_float_eq_tol(r.out.data[c * 100 + j],
					       z ? 0.0f : 2.0f * x[c * 100 + j], 1e-5);
	}
	ck_assert_msg(dropped > 60 && dropped < 140, "%d channels dropped", dropped);
	rig_free(&r);
	free(x);
}
END_TEST

/* p = 0 in training (dropout, dropout2d, drop_path): the identity, bit for
 * bit, with no mask and no draw from the generator (PyTorch's at::dropout
 * returns its input when p == 0), and backward passes dy through. */
START_TEST(values_dropout_p0)
{
	static const char *const ops[] = {"dropout", "dropout2d", "drop_path"};
	struct dl_shape in = SH(3, 5, 7);   /* odd sizes */
	float x[105], dy[105];
	for (int i = 0; i < 105; i++) {
		x[i] = (float)(i % 11) * 0.37f - 1.9f;
		dy[i] = (float)(i % 5) * 0.5f - 1.1f;
	}
	const float *v[] = {x};
	for (int k = 0; k < 3; k++) {
		struct rig r;
		run_values(&r, ops[k], "p: 0", 1, &in, v, in, 1);
		ck_assert_uint_eq(r.n.saved_bytes, 0);
		ck_assert_msg(memcmp(r.out.data, x, sizeof x) == 0, "%s p = 0: not the identity",
			      ops[k]);
		struct dl_rng before = r.rng;
		memset(r.out.data, 0, sizeof x);
		r.n.op->forward(&r.n, r.in, &r.out, &r.ctx);
		ck_assert_msg(memcmp(&before, &r.rng, sizeof before) == 0,
			      "%s p = 0 drew from the generator", ops[k]);
		ck_assert(memcmp(r.out.data, x, sizeof x) == 0);
		r.n.op->backward(&r.n, r.in, &r.out, dy, r.din, &r.ctx);
		ck_assert_msg(memcmp(r.din[0], dy, sizeof dy) == 0, "%s p = 0: dx != dy", ops[k]);
		rig_free(&r);
	}
}
END_TEST

/* drop_path: the identity at inference; in training each sample is either
 * all zeros or x / (1 - p), about p of them zeros, and backward routes the
 * gradient through the same draws. */
START_TEST(values_drop_path)
{
	enum { N = 400, S = 30 };
	struct dl_shape in = SH(N, 3, 10);
	float *x = malloc(N * S * sizeof *x);
	for (int i = 0; i < N * S; i++)
		x[i] = 1.0f + (float)(i % 7);
	const float *v[] = {x};
	struct rig r;
	run_values(&r, "drop_path", "p: 0.3", 1, &in, v, in, 0);
	expect_values(&r, x, 0);
	rig_free(&r);
	run_values(&r, "drop_path", "p: 0.3", 1, &in, v, in, 1);
	float *dy = alloc_floats(N * S);
	for (int i = 0; i < N * S; i++)
		dy[i] = 1.0f;
	r.n.op->backward(&r.n, r.in, &r.out, dy, r.din, &r.ctx);
	int dropped = 0;
	for (int n = 0; n < N; n++) {
		int z = r.out.data[n * S] == 0.0f;
		dropped += z;
		for (int j = 0; j < S; j++) {
			ck_assert_float_eq_tol(r.out.data[n * S + j],
					       z ? 0.0f : x[n * S + j] / 0.7f, 1e-5);
			ck_assert_float_eq_tol(r.din[0][n * S + j], z ? 0.0f : 1.0f / 0.7f, 1e-5);
		}
	}
	ck_assert_msg(dropped > N * 0.22 && dropped < N * 0.38, "%d of %d samples dropped",
		      dropped, N);
	rig_free(&r);
	/* p = 1: every sample zero; p = 0: the identity */
	run_values(&r, "drop_path", "p: 1", 1, &in, v, in, 1);
	for (int i = 0; i < N * S; i++)
		ck_assert(r.out.data[i] == 0.0f);
	rig_free(&r);
	run_values(&r, "drop_path", "p: 0", 1, &in, v, in, 1);
	expect_values(&r, x, 0);
	rig_free(&r);
	free(dy);
	free(x);
}
END_TEST

/* ---- located errors ---- */

/* infer fails with DL_EINPUT, naming t.yaml:LINE:COL of hyperparameter
 * `hp` (NULL: the entry), the op, and `what`. */
static void expect_error(const char *op, const char *hps, int n_in,
			 const struct dl_shape *shapes, const char *hp,
			 const char *what)
{
	struct rig r;
	struct dl_error err;
	int rc = rig_infer(&r, op, hps, n_in, shapes, &err);
	ck_assert_msg(rc == DL_EINPUT, "%s {%s}: infer gave %d, expected DL_EINPUT",
		      op, hps, rc);
	char where[128];
	snprintf(where, sizeof where, "t.yaml:7:3: %s: ", op);
	if (hp) {
		int k;
		for (k = 0; k < r.n.op->n_hp; k++)
			if (strcmp(r.n.op->hp[k].name, hp) == 0)
				break;
		ck_assert_int_lt(k, r.n.op->n_hp);
		ck_assert(r.n.hp[k].set);
		snprintf(where, sizeof where, "t.yaml:%d:%d: %s: ",
			 r.n.hp[k].line, r.n.hp[k].col, op);
	}
	ck_assert_msg(strstr(err.msg, where) == err.msg,
		      "%s {%s}: message '%s' does not start with '%s'", op, hps,
		      err.msg, where);
	ck_assert_msg(strstr(err.msg, what) != NULL,
		      "%s {%s}: message '%s' does not say '%s'", op, hps,
		      err.msg, what);
	dl_node_release(&r.n);
}

START_TEST(errors)
{
	struct dl_shape add_bad[] = {SH(2, 3, 4), SH(2, 5)};
	expect_error("add", "", 2, add_bad, NULL, "do not broadcast");
	struct dl_shape add_batch[] = {SH(2, 3), SH(3, 3)};
	expect_error("add", "", 2, add_batch, NULL, "batch size");
	struct dl_shape mul_bad[] = {SH(2, 3), SH(2, 3), SH(2, 4)};
	expect_error("mul", "", 3, mul_bad, NULL, "input 3");
	struct dl_shape lin[] = {SH(2, 16)};
	expect_error("linear", "out_features: 3, in_features: 20", 1, lin,
		     "in_features", "in_features is 20 but the input [2, 16] has 16 features");
	struct dl_shape mm[] = {SH(2, 3, 4), SH(2, 5, 6)};
	expect_error("matmul", "", 2, mm, NULL, "(4) must equal the second's next-to-last (5)");
	struct dl_shape mm1[] = {SH(2, 3), SH(2, 3, 6)};
	expect_error("matmul", "", 2, mm1, NULL, "needs a matrix per sample");
	struct dl_shape r3[] = {SH(2, 4, 4)};
	expect_error("reshape", "shape: [3, 5]", 1, r3, "shape",
		     "shape holds 15 values per sample but the input [2, 4, 4] has 16");
	expect_error("reshape", "shape: [-1, 3]", 1, r3, "shape", "cannot infer the -1");
	expect_error("reshape", "shape: [-1, -1]", 1, r3, "shape", "more than one -1");
	struct dl_shape p3[] = {SH(2, 3, 4)};
	expect_error("permute", "dims: [1, 0, 2]", 1, p3, "dims", "dims[0] must be 0");
	expect_error("permute", "dims: [0, 1]", 1, p3, "dims", "3 dimensions");
	expect_error("permute", "dims: [0, 1, 1]", 1, p3, "dims", "twice");
	expect_error("transpose", "dim0: 0, dim1: 2", 1, p3, "dim0", "batch dimension");
	expect_error("transpose", "dim0: 1, dim1: -3", 1, p3, "dim1", "batch dimension");
	expect_error("transpose", "dim0: 1, dim1: 3", 1, p3, "dim1", "out of range");
	expect_error("slice", "dim: 0", 1, p3, "dim", "batch dimension");
	expect_error("slice", "dim: 5", 1, p3, "dim", "out of range");
	expect_error("mean", "dim: [1, 0]", 1, p3, "dim", "batch dimension");
	expect_error("mean", "dim: [1, -2]", 1, p3, "dim", "twice");
	expect_error("flatten", "start_dim: 0", 1, p3, "start_dim", "batch dimension");
	expect_error("flatten", "start_dim: 2, end_dim: 1", 1, p3, "start_dim", "comes after");
	expect_error("pad", "padding: [1, 2, 3]", 1, p3, "padding", "pairs");
	expect_error("pad", "padding: [1, 1, 1, 1, 1, 1]", 1, p3, "padding", "batch dimension");
	expect_error("pad", "padding: [-3, -2]", 1, p3, "padding", "negative size");
	struct dl_shape cat[] = {SH(2, 3, 4), SH(2, 3, 5)};
	expect_error("concat", "", 2, cat, NULL, "all dimensions but dim 1 must match");
	expect_error("concat", "dim: 0", 2, cat, "dim", "batch dimension");
	expect_error("softmax", "dim: 3", 1, p3, "dim", "out of range");
	expect_error("log_softmax", "dim: -4", 1, p3, "dim", "out of range");
	expect_error("dropout", "p: 1.5", 1, p3, "p", "between 0 and 1");
	struct dl_shape d1[] = {SH(4)};
	expect_error("dropout2d", "", 1, d1, NULL, "channels");
	expect_error("drop_path", "p: 1.5", 1, p3, "p", "between 0 and 1");
	expect_error("sum", "dim: 0", 1, p3, "dim", "batch dimension");
	expect_error("max", "dim: [2, -3]", 1, p3, "dim", "batch dimension");
	expect_error("min", "dim: [1, -2]", 1, p3, "dim", "twice");
	expect_error("argmax", "dim: 3", 1, p3, "dim", "out of range");
	expect_error("argmax", "dim: -3", 1, p3, "dim", "batch dimension");
	struct dl_shape e3[] = {SH(2, 0, 4)};
	expect_error("max", "dim: 1", 1, e3, "dim", "dimension 1 of the input [2, 0, 4] is empty");
	expect_error("group_norm", "num_groups: 2", 1, p3, "num_groups",
		     "num_groups 2 does not divide the input's 3 channels");
	expect_error("group_norm", "num_groups: 3, num_channels: 6", 1, p3, "num_channels",
		     "num_channels 6 does not match the input's 3 channels");
	struct dl_shape v1[] = {SH(5)};
	expect_error("group_norm", "num_groups: 1", 1, v1, NULL, "expects an [N, C, ...] input");
	expect_error("instance_norm1d", "", 1, lin, NULL, "expects a [N, C, L] input, got [2, 16]");
	struct dl_shape i4[] = {SH(2, 3, 4, 5)};
	expect_error("instance_norm1d", "", 1, i4, NULL, "instance_norm2d takes [N, C, H, W]");
	expect_error("instance_norm2d", "", 1, p3, NULL, "expects a [N, C, H, W] input, got [2, 3, 4]");
	expect_error("instance_norm2d", "num_features: 4", 1, i4, "num_features",
		     "num_features 4 does not match the input's 3 channels");
	expect_error("adaptive_max_pool2d", "output_size: 2", 1, p3, NULL,
		     "expects a [N, C, H, W] input");
	expect_error("adaptive_max_pool1d", "output_size: [2, 2]", 1, p3, "output_size",
		     "output_size has 2 values");
}
END_TEST

/* Parameters re-declared by a second infer keep their shape; another input
 * size that would change them is an error. */
START_TEST(infer_idempotent)
{
	struct rig r;
	struct dl_error err;
	struct dl_shape a = SH(2, 6), b = SH(5, 6), c = SH(2, 7);
	ck_assert_int_eq(rig_infer(&r, "linear", "out_features: 3", 1, &a, &err), 0);
	struct dl_shape out;
	ck_assert_int_eq(r.n.op->infer(&r.n, &b, &out, &err), 0);
	ck_assert_int_eq(r.n.n_params, 2);
	ck_assert_int_eq(out.d[0], 5);
	ck_assert_int_eq(r.n.op->infer(&r.n, &c, &out, &err), DL_EINPUT);
	dl_node_release(&r.n);
}
END_TEST

/* ---- the pointwise ops of the contract's "Also" list, positional_encoding
 * with mode: concat and graph_conv on [N, ..., V, F] ---- */

static const struct gcase pointwise_cases[] = {
	{"relu6", "", 1, {SHAPE(3, 5, 7)}, 0, 0.05, 0},
	{"relu6", "", 1, {SHAPE(1, 13)}, 0, 0.05, 6},
	{"hardswish", "", 1, {SHAPE(3, 5, 7)}, 0, 0, 0},
	{"hardswish", "", 1, {SHAPE(2, 9)}, 0, 0.05, 3},
	{"hardswish", "", 1, {SHAPE(1, 3, 3)}, 0, 0.05, -3},
	{"hardsigmoid", "", 1, {SHAPE(3, 5)}, 0, 0, 0},
	{"hardsigmoid", "", 1, {SHAPE(2, 9)}, 0, 0.05, 3},
	{"hardsigmoid", "", 1, {SHAPE(1, 11)}, 0, 0.05, -3},
	{"elu", "", 1, {SHAPE(3, 5, 7)}, 0, 0.05, 0},
	{"elu", "alpha: 0.3", 1, {SHAPE(1, 13)}, 0, 0.05, 0},
	{"selu", "", 1, {SHAPE(2, 3, 5)}, 0, 0.05, 0},
	{"mish", "", 1, {SHAPE(3, 5, 7)}, 0, 0, 0},
	{"mish", "", 1, {SHAPE(1, 9)}, 0, 0, -2},
	{"exp", "", 1, {SHAPE(3, 5, 7)}, 0, 0, 0},
	{"log", "", 1, {SHAPE(2, 3, 5)}, 0, 0, 2},
	{"log", "", 1, {SHAPE(1, 9)}, 0, 0.2, 1.3},
	{"sqrt", "", 1, {SHAPE(2, 3, 5)}, 0, 0, 2},
	{"abs", "", 1, {SHAPE(3, 5, 7)}, 0, 0.05, 0},
	{"neg", "", 1, {SHAPE(1, 4, 3)}, 0, 0, 0},
	{"clamp", "min: 0", 1, {SHAPE(3, 5, 7)}, 0, 0.05, 0},
	{"clamp", "max: 0", 1, {SHAPE(1, 13)}, 0, 0.05, 0},
	{"clamp", "min: 0, max: 6", 1, {SHAPE(2, 9)}, 0, 0.05, 6},
	{"clamp", "min: -0.01, max: 0.01", 1, {SHAPE(2, 5)}, 0, 0.05, 0},
	{"scale", "factor: 2.5, shift: -1", 1, {SHAPE(3, 5, 7)}, 0, 0, 0},
	{"scale", "", 1, {SHAPE(1, 3)}, 0, 0, 0},
	{"positional_encoding", "mode: concat", 1, {SHAPE(2, 5, 3)}, 0, 0, 0},
	{"positional_encoding", "mode: concat, dim: 4, base: 50", 1, {SHAPE(1, 3, 2)}, 0, 0, 0},
	{"positional_encoding", "kind: learned, max_len: 7, mode: concat, dim: 2",
	 1, {SHAPE(3, 5, 3)}, 0, 0, 0},
	{"positional_encoding", "kind: learned, max_len: 4, mode: concat",
	 1, {SHAPE(2, 4, 3)}, 0, 0, 0},
	/* adjacencies U(0, 2): positive degrees */
	{"graph_conv", "out_features: 3", 2, {SHAPE(2, 3, 4, 3), SHAPE(2, 4, 4)}, 0, 0, 1},
	{"graph_conv", "out_features: 2", 2, {SHAPE(3, 2, 4, 3), SHAPE(1, 4, 4)}, 0, 0, 1},
	{"graph_conv", "out_features: 2, bias: false", 2,
	 {SHAPE(2, 2, 3, 5, 2), SHAPE(1, 5, 5)}, 0, 0, 1},
	{"graph_conv", "out_features: 4", 2, {SHAPE(3, 5, 2), SHAPE(1, 5, 5)}, 0, 0, 1},
};

START_TEST(grad_pointwise) { RUN_CASES(pointwise_cases, gradcheck); }
END_TEST

START_TEST(zero_samples_pointwise) { RUN_CASES(pointwise_cases, zero_batch); }
END_TEST

START_TEST(values_pointwise)
{
	struct dl_shape in = SH(1, 7);
	const float x[] = {-4.0f, -3.0f, -0.5f, 0.0f, 0.7f, 3.0f, 7.0f};
	const float *v[] = {x};
	/* torch.nn.functional.*(torch.tensor(x)), float32 */
	check_values("relu6", "", 1, &in, v, in,
		     (const float[]){0, 0, 0, 0, 0.7f, 3.0f, 6.0f}, 0);
	check_values("hardswish", "", 1, &in, v, in,
		     (const float[]){-0.0f, -0.0f, -0.2083333283662796f, 0.0f,
				     0.43166664242744446f, 3.0f, 7.0f}, 1e-6);
	check_values("hardsigmoid", "", 1, &in, v, in,
		     (const float[]){0, 0, 0.4166666567325592f, 0.5f,
				     0.6166666746139526f, 1.0f, 1.0f}, 1e-6);
	check_values("elu", "alpha: 0.5", 1, &in, v, in,
		     (const float[]){-0.49084219336509705f, -0.47510647773742676f,
				     -0.19673466682434082f, 0.0f, 0.7f, 3.0f, 7.0f}, 1e-6);
	check_values("selu", "", 1, &in, v, in,
		     (const float[]){-1.7258986234664917f, -1.6705687046051025f,
				     -0.6917581558227539f, 0.0f, 0.7354906797409058f,
				     3.1521029472351074f, 7.354907035827637f}, 1e-6);
	check_values("mish", "", 1, &in, v, in,
		     (const float[]){-0.07259175181388855f, -0.14564746618270874f,
				     -0.22074376046657562f, 0.0f, 0.5611483454704285f,
				     2.98653507232666f, 6.999988555908203f}, 1e-6);
	check_values("abs", "", 1, &in, v, in,
		     (const float[]){4, 3, 0.5f, 0, 0.7f, 3, 7}, 0);
	check_values("neg", "", 1, &in, v, in,
		     (const float[]){4, 3, 0.5f, -0.0f, -0.7f, -3, -7}, 0);
	check_values("clamp", "min: -0.5, max: 0.5", 1, &in, v, in,
		     (const float[]){-0.5f, -0.5f, -0.5f, 0, 0.5f, 0.5f, 0.5f}, 0);
	check_values("clamp", "max: 0", 1, &in, v, in,
		     (const float[]){-4, -3, -0.5f, 0, 0, 0, 0}, 0);
	check_values("clamp", "min: 0.7", 1, &in, v, in,
		     (const float[]){0.7f, 0.7f, 0.7f, 0.7f, 0.7f, 3, 7}, 0);
	check_values("scale", "factor: -2, shift: 0.5", 1, &in, v, in,
		     (const float[]){8.5f, 6.5f, 1.5f, 0.5f, -0.9f, -5.5f, -13.5f}, 1e-6);
	struct dl_shape p3 = SH(1, 3);
	const float y[] = {0.25f, 1.0f, 4.0f}, *w[] = {y};
	check_values("exp", "", 1, &p3, w, p3,
		     (const float[]){1.2840254166877414f, 2.718281828459045f,
				     54.598150033144236f}, 1e-6);
	check_values("log", "", 1, &p3, w, p3,
		     (const float[]){-1.3862943611198906f, 0.0f,
				     1.3862943611198906f}, 1e-6);
	check_values("sqrt", "", 1, &p3, w, p3, (const float[]){0.5f, 1, 2}, 0);
	/* concat: [x, sin(t), cos(t)] for D = 1, dim 2; t = 0, 1, 2 */
	struct dl_shape s = SH(1, 3, 1), so = SH(1, 3, 3);
	const float *u[] = {y};
	check_values("positional_encoding", "mode: concat, dim: 2", 1, &s, u, so,
		     (const float[]){0.25f, 0, 1, 1.0f, 0.8414709848078965f,
				     0.5403023058681398f, 4.0f, 0.9092974268256817f,
				     -0.4161468365471424f}, 1e-6);
}
END_TEST

START_TEST(errors_pointwise)
{
	struct dl_shape p3[] = {SH(2, 3, 4)};
	expect_error("clamp", "min: 2, max: 1", 1, p3, "min", "min 2 is greater than max 1");
	expect_error("clamp", "", 1, p3, NULL, "needs min, max or both");
	expect_error("positional_encoding", "dim: 5", 1, p3, "dim",
		     "dim is 5 but the input [2, 3, 4] has 4 channels");
	struct dl_shape gx[] = {SH(2, 3, 4, 5), SH(2, 3, 3)};
	expect_error("graph_conv", "out_features: 2", 2, gx, NULL,
		     "it must be [2, 4, 4] (or batch 1, shared)");
	struct dl_shape g2[] = {SH(2, 4), SH(2, 4, 4)};
	expect_error("graph_conv", "out_features: 2", 2, g2, NULL,
		     "[N, V, F] or [N, ..., V, F]");
}
END_TEST

Suite *make_ops_suite(void)
{
	Suite *s = suite_create("ops");
	TCase *g = tcase_create("gradients");
	tcase_set_timeout(g, 120);
	tcase_add_test(g, grad_linear);
	tcase_add_test(g, grad_elementwise);
	tcase_add_test(g, grad_activation);
	tcase_add_test(g, grad_shape);
	tcase_add_test(g, grad_reduce);
	tcase_add_test(g, grad_dropout);
	tcase_add_test(g, zero_samples);
	suite_add_tcase(s, g);
	TCase *v = tcase_create("values");
	tcase_add_test(v, values_slice);
	tcase_add_test(v, values_pad);
	tcase_add_test(v, values_permute);
	tcase_add_test(v, values_broadcast);
	tcase_add_test(v, values_activation);
	tcase_add_test(v, values_linear_matmul);
	tcase_add_test(v, values_mean_concat_reshape);
	tcase_add_test(v, values_dropout);
	tcase_add_test(v, values_drop_path);
	tcase_add_test(v, values_dropout_p0);
	suite_add_tcase(s, v);
	TCase *e = tcase_create("errors");
	tcase_add_test(e, errors);
	tcase_add_test(e, infer_idempotent);
	suite_add_tcase(s, e);
	TCase *pw = tcase_create("pointwise");
	tcase_set_timeout(pw, 120);
	tcase_add_test(pw, grad_pointwise);
	tcase_add_test(pw, zero_samples_pointwise);
	tcase_add_test(pw, values_pointwise);
	tcase_add_test(pw, errors_pointwise);
	suite_add_tcase(s, pw);
	return s;
}
