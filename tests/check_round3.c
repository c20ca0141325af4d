/* The round-3 ops (where, comparisons and logical ops, expand, tile, triu,
 * tril, topk, upsample's size_of): forward and gradients of every input
 * against PyTorch's autograd on tools/gen_round3_fixtures.py's cases
 * (tests/data/round3/cases.txt), with several inputs and outputs each;
 * an op that passes no gradient must leave its inputs' gradients at 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check_suites.h"
#include "engine/op.h"
#include "io/npy.h"
#include "model/hparams.h"
#include "ops/registry.h"

#ifndef SRCDIR
#define SRCDIR "."
#endif
#define DATA SRCDIR "/tests/data/round3"

#define MAX_CASES 64
#define MAX_IN 4

struct rcase {
	char name[96];
	char op[48];
	int n_in, n_out;
	char hps[256];
};

static struct rcase cases[MAX_CASES];
static int n_cases = -1;

static void load_cases(void)
{
	if (n_cases >= 0)
		return;
	n_cases = 0;
	FILE *f = fopen(DATA "/cases.txt", "r");
	if (!f)
		return;
	char line[512];
	while (fgets(line, sizeof line, f) && n_cases < MAX_CASES) {
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		struct rcase *c = &cases[n_cases];
		char *f1 = strtok(line, "|"), *f2 = strtok(NULL, "|");
		char *f3 = strtok(NULL, "|"), *f4 = strtok(NULL, "|");
		char *f5 = strtok(NULL, "");
		if (!f4)
			continue;
		snprintf(c->name, sizeof c->name, "%s", f1);
		snprintf(c->op, sizeof c->op, "%s", f2);
		c->n_in = atoi(f3);
		c->n_out = atoi(f4);
		snprintf(c->hps, sizeof c->hps, "%s", f5 ? f5 : "");
		if (c->n_in < 1 || c->n_in > MAX_IN || c->n_out < 1 || c->n_out > DL_MAX_OUT)
			continue;
		n_cases++;
	}
	fclose(f);
}

/* DATA/NAME.WHAT.npy into t (the caller frees t->data) */
static void load_npy(const struct rcase *c, const char *what, struct dl_tensor *t)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s.%s.npy", DATA, c->name, what);
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	struct dl_error err = {0};
	int rc = dl_npy_read(f, path, t, &err);
	fclose(f);
	ck_assert_msg(rc == 1, "%s: %s", path, err.msg);
}

/* got against DATA/NAME.WHAT.npy: ||got - want||_inf / ||want||_inf (absolute
 * when want is all zeros) at most 1e-5, NaN where PyTorch has NaN */
static void expect_close(const struct rcase *c, const char *what,
			 const float *got, const struct dl_shape *shape)
{
	char a[64], b[64];
	struct dl_tensor t;
	load_npy(c, what, &t);
	ck_assert_msg(dl_shape_equal(&t.shape, shape), "%s: %s has shape %s, PyTorch's %s",
		      c->name, what, dl_shape_str(shape, a, sizeof a),
		      dl_shape_str(&t.shape, b, sizeof b));
	double num = 0.0, den = 0.0;
	int64_t n = dl_shape_numel(shape);
	for (int64_t i = 0; i < n; i++) {
		if (isnan(t.data[i]) || isnan(got[i])) {
			ck_assert_msg(isnan(t.data[i]) && isnan(got[i]),
				      "%s: %s[%lld] is %g, PyTorch's %g", c->name, what,
				      (long long)i, got[i], t.data[i]);
			continue;
		}
		double d = fabs((double)got[i] - t.data[i]);
		num = d > num ? d : num;
		den = fabs(t.data[i]) > den ? fabs(t.data[i]) : den;
	}
	free(t.data);
	double e = den > 0 ? num / den : num;
	ck_assert_msg(e <= 1e-5, "%s: %s differs from PyTorch: relative error %g",
		      c->name, what, e);
}

START_TEST(test_round3_fixture)
{
	load_cases();
	ck_assert_msg(n_cases > 0, "no cases in %s/cases.txt", DATA);
	const struct rcase *c = &cases[_i];
	const struct dl_op_desc *op = dl_op_find(c->op);
	ck_assert_msg(op != NULL, "op %s not registered", c->op);
	struct dl_node n;
	struct dl_error err = {0};
	ck_assert_msg(dl_node_setup(&n, op, c->hps, &err) == 0, "%s: %s", c->name, err.msg);
	n.n_in = c->n_in;
	n.in = calloc((size_t)c->n_in, sizeof *n.in);
	int n_out = op->n_outputs ? op->n_outputs(&n) : 1;
	ck_assert_int_eq(n_out, c->n_out);
	n.n_out = n_out;

	struct dl_tensor in[MAX_IN], out[DL_MAX_OUT];
	struct dl_shape xs[MAX_IN], ys[DL_MAX_OUT];
	float *din[MAX_IN], *gy[DL_MAX_OUT];
	char what[16];
	for (int i = 0; i < c->n_in; i++) {
		snprintf(what, sizeof what, "x%d", i);
		load_npy(c, what, &in[i]);
		xs[i] = in[i].shape;
	}
	ck_assert_msg(op->infer(&n, xs, ys, &err) == 0, "%s: %s", c->name, err.msg);
	for (int k = 0; k < n_out; k++) {
		out[k].shape = ys[k];
		out[k].data = calloc((size_t)dl_shape_numel(&ys[k]) + 1, sizeof(float));
		snprintf(what, sizeof what, "gy%d", k);
		struct dl_tensor g;
		load_npy(c, what, &g);
		ck_assert(dl_shape_equal(&g.shape, &ys[k]));
		gy[k] = g.data;
	}
	void *ws = malloc(n.ws_bytes + 16);
	struct dl_ctx ctx;
	memset(&ctx, 0, sizeof ctx);
	ctx.ws = ws;
	op->forward(&n, in, out, &ctx);
	for (int k = 0; k < n_out; k++) {
		snprintf(what, sizeof what, "y%d", k);
		expect_close(c, what, out[k].data, &ys[k]);
	}
	for (int i = 0; i < c->n_in; i++)
		din[i] = calloc((size_t)dl_shape_numel(&xs[i]) + 1, sizeof(float));
	ctx.dout = (const float *const *)gy;
	op->backward(&n, in, out, gy[0], din, &ctx);
	for (int i = 0; i < c->n_in; i++) {
		snprintf(what, sizeof what, "gx%d", i);
		expect_close(c, what, din[i], &xs[i]);
		free(din[i]);
		free(in[i].data);
	}
	for (int k = 0; k < n_out; k++) {
		free(out[k].data);
		free(gy[k]);
	}
	free(ws);
	dl_node_release(&n);
}
END_TEST

Suite *make_round3_suite(void)
{
	Suite *s = suite_create("round3");
	TCase *tc = tcase_create("pytorch");
	load_cases();
	tcase_add_loop_test(tc, test_round3_fixture, 0, n_cases > 0 ? n_cases : 1);
	suite_add_tcase(s, tc);
	return s;
}
