/* dlrun gradcheck: back-propagated gradients against central finite
 * differences of L = sum(r * output) for a fixed random r, accumulated in
 * double, on a small random batch; the worst relative error per entry. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/yamlutil.h"
#include "train/step.h"
#include "verbs/verbs.h"

struct check {
	struct dl_graph *g;
	float **in;          /* [n_inputs] random inputs */
	float **din;         /* [n_inputs] their gradients (NULL for int inputs) */
	float **r;           /* [n_outputs] the projection */
	struct dl_step step; /* forward and backward, seeded with r */
	struct dl_rng rng;   /* dropout: reseeded before every forward */
	uint64_t seed;
};

/* L = sum_k sum_j r_k[j] out_k[j], in double. */
static double objective(struct check *C, int train)
{
	struct dl_ctx ctx = {.train = train, .rng = &C->rng, .threads = dl_threads()};
	dl_rng_seed(&C->rng, C->seed + 17);
	dl_step_forward(&C->step, C->in, &ctx);
	double L = 0;
	for (int k = 0; k < C->g->n_outputs; k++) {
		const struct dl_value *v = &C->g->values[C->g->outputs[k]];
		int64_t n = dl_shape_numel(&v->shape);
		for (int64_t j = 0; j < n; j++)
			L += (double)C->r[k][j] * v->data[j];
	}
	return L;
}

/* Central differences of L along x[j] at the steps h, h/3, h/10, h/30,
 * h/100. Large
 * steps suffer from curvature, small ones from float32 rounding of the
 * outputs, and a step that straddles a kink (relu at 0, a max switching)
 * makes the two one-sided differences disagree: such steps are left out.
 * Writes the estimates to est[] and returns how many there are. */
#define N_STEPS 5

static int numeric(struct check *C, float *x, double h, double scale,
		   double est[N_STEPS])
{
	static const double frac[N_STEPS] = {1, 1.0 / 3, 0.1, 1.0 / 30, 0.01};
	float keep = *x;
	double f0 = objective(C, 1);
	int n = 0;
	for (int t = 0; t < N_STEPS; t++) {
		double ht = h * frac[t];
		*x = (float)(keep + ht);
		double hp = (double)*x - keep;
		double up = objective(C, 1);
		*x = (float)(keep - ht);
		double hm = keep - (double)*x;
		double down = objective(C, 1);
		*x = keep;
		double right = (up - f0) / hp, left = (f0 - down) / hm;
		if (fabs(right - left) <= 0.5 * fmax(fmax(fabs(right), fabs(left)), scale))
			est[n++] = (up - down) / (hp + hm);
	}
	return n;
}

struct worst {
	double err;
	double analytic, numeric;
	int64_t at;
	int skipped;      /* elements at a kink for every step */
};

/* Compares up to `samples` elements of x (gradient ga) chosen at random. */
static void compare(struct check *C, float *x, const float *ga, int64_t n, int samples,
		    double h, double scale, struct worst *w)
{
	struct dl_rng pick;
	dl_rng_seed(&pick, C->seed + (uint64_t)n);
	for (int s = 0; s < samples && s < n; s++) {
		int64_t j = n <= samples ? s : (int64_t)dl_rng_below(&pick, (uint64_t)n);
		double a = ga[j], est[N_STEPS], num = 0, e = INFINITY;
		int k = numeric(C, &x[j], h, scale, est);
		if (k == 0) {
			w->skipped++;
			continue;
		}
		/* the estimates' own spread over the steps measures their noise
		 * (float32 outputs) and curvature error; a disagreement within it
		 * says nothing, while a wrong gradient lies far outside it */
		double lo = est[0], hi = est[0];
		for (int t = 1; t < k; t++) {
			lo = fmin(lo, est[t]);
			hi = fmax(hi, est[t]);
		}
		double spread = hi - lo;
		for (int t = 0; t < k; t++) {
			double d = fmax(fabs(a - est[t]) - spread / 2, 0);
			double et = d / fmax(fmax(fabs(a), fabs(est[t])), scale);
			if (et < e) {
				e = et;
				num = est[t];
			}
		}
		if (e > w->err || w->at < 0)
			*w = (struct worst){e, a, num, j, w->skipped};
	}
}

static int gradcheck_main(int argc, char **argv, struct dl_error *err)
{
	static const struct option opts[] = {
		{"weights", required_argument, NULL, 'w'},
		{"seed", required_argument, NULL, 's'},
		{"batch-size", required_argument, NULL, 'b'},
		{"input-shape", required_argument, NULL, 'I'},
		{"tolerance", required_argument, NULL, 'T'},
		{"step", required_argument, NULL, 'E'},
		{"samples", required_argument, NULL, 'n'},
		{"ignore-extra", no_argument, NULL, 'X'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *wflag = NULL, *model = NULL;
	long long seed = 0, batch = 2, samples = 12;
	double tol = 1e-2, h = 1e-2;
	int rc = 0, ch, n_specs = 0, ignore_extra = 0;
	char **specs = calloc((size_t)argc + 1, sizeof *specs);
	if (!specs)
		return dl_error_set(err, DL_ERUN, "out of memory");
	opterr = 0;
	while (rc == 0 && (ch = getopt_long(argc, argv, ":w:s:b:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'w':
			wflag = optarg;
			break;
		case 'X':
			ignore_extra = 1;
			break;
		case 's':
			rc = verb_int("gradcheck", "--seed", optarg, 0, INT64_MAX, &seed, err);
			break;
		case 'b':
			rc = verb_int("gradcheck", "--batch-size", optarg, 1, 1024, &batch, err);
			break;
		case 'n':
			rc = verb_int("gradcheck", "--samples", optarg, 1, 1 << 20, &samples, err);
			break;
		case 'I':
			specs[n_specs++] = optarg;
			break;
		case 'T':
			if (dl_parse_float(optarg, &tol) || tol <= 0)
				rc = dl_error_set(err, DL_EINPUT, "gradcheck: --tolerance takes a positive number");
			break;
		case 'E':
			if (dl_parse_float(optarg, &h) || h <= 0)
				rc = dl_error_set(err, DL_EINPUT, "gradcheck: --step takes a positive number");
			break;
		case 'h':
			verb_usage(&verb_gradcheck);
			free(specs);
			return 0;
		default:
			rc = verb_bad_option("gradcheck", ch, argv, err);
		}
	}
	struct check C;
	memset(&C, 0, sizeof C);
	C.seed = (uint64_t)seed;
	if (rc == 0)
		rc = verb_model_arg("gradcheck", argc, argv, &model, err);
	if (rc == 0)
		rc = dl_model_load(&C.g, model, err);
	if (rc == 0)
		rc = verb_infer_shapes(C.g, specs, n_specs, batch, err);
	struct dl_graph *g = C.g;
	if (rc == 0) {
		if (wflag)
			rc = verb_weights(g, wflag, ignore_extra, err);
		else
			dl_graph_init_params(g, (uint64_t)seed);
	}
	if (rc == 0)
		rc = dl_graph_train_setup(g, err);
	if (rc == 0)
		rc = dl_graph_plan(g, 1, err);
	if (rc == 0) {
		C.in = calloc((size_t)g->n_inputs, sizeof *C.in);
		C.din = calloc((size_t)g->n_inputs, sizeof *C.din);
		C.r = calloc((size_t)g->n_outputs, sizeof *C.r);
		if (!C.in || !C.din || !C.r)
			rc = dl_error_set(err, DL_ERUN, "out of memory");
	}
	struct dl_rng data;
	dl_rng_seed(&data, (uint64_t)seed + 1);
	for (int i = 0; rc == 0 && i < g->n_inputs; i++) {
		int64_t n = dl_shape_numel(&g->values[i].shape);
		C.in[i] = malloc((size_t)(n + 1) * sizeof(float));
		C.din[i] = g->inputs[i].is_int ? NULL : calloc((size_t)n + 1, sizeof(float));
		if (!C.in[i] || (!g->inputs[i].is_int && !C.din[i])) {
			rc = dl_error_set(err, DL_ERUN, "out of memory");
			break;
		}
		for (int64_t j = 0; j < n; j++)
			C.in[i][j] = g->inputs[i].is_int ? (float)dl_rng_below(&data, 4)
							 : (float)dl_rng_normal(&data);
	}
	for (int k = 0; rc == 0 && k < g->n_outputs; k++) {
		int64_t n = dl_shape_numel(&g->values[g->outputs[k]].shape);
		if (!(C.r[k] = malloc((size_t)(n + 1) * sizeof(float)))) {
			rc = dl_error_set(err, DL_ERUN, "out of memory");
			break;
		}
		for (int64_t j = 0; j < n; j++)
			C.r[k][j] = (float)dl_rng_normal(&data);
	}
	double worst_all = 0;
	const char *worst_where = "";
	char worst_buf[600];
	if (rc == 0) {
		struct dl_ctx ctx = {.train = 1, .rng = &C.rng, .threads = dl_threads()};
		C.step = (struct dl_step){.g = g, .dout = C.r};
		objective(&C, 1);
		dl_step_backward(&C.step, C.din, &ctx);
		/* the gradients' own scale: a float32 forward resolves differences of
	 * L only to about 1e-5 of the largest gradient at these steps, so
	 * errors are measured against at least 1e-2 of it */
		double scale = 0;
		for (size_t j = 0; j < g->n_param_floats; j++)
			scale = fmax(scale, fabs(g->grad_block[j]));
		for (int i = 0; i < g->n_inputs; i++)
			for (int64_t j = 0; C.din[i] && j < dl_shape_numel(&g->values[i].shape); j++)
				scale = fmax(scale, fabs(C.din[i][j]));
		scale = fmax(scale * 1e-2, 1e-6);
		printf("%-28s %-18s %12s %14s %14s\n", "gradient of", "op", "rel. error",
		       "analytic", "numeric");
		for (int i = 0; i < g->n_nodes; i++) {
			struct dl_node *n = &g->nodes[i];
			for (int k = 0; k < n->n_params; k++) {
				struct dl_param *p = &n->params[k];
				if (p->buffer)
					continue;
				struct worst w = {0, 0, 0, -1, 0};
				compare(&C, p->data, p->grad, dl_shape_numel(&p->shape), (int)samples,
					h, scale, &w);
				char key[512];
				dl_param_key(n, p, key, sizeof key);
				printf("%-28s %-18s %12.3e %14.6g %14.6g", key, n->op->name, w.err,
				       w.analytic, w.numeric);
				if (w.skipped)
					printf("  (%d at a kink, skipped)", w.skipped);
				putchar('\n');
				if (w.err > worst_all) {
					worst_all = w.err;
					snprintf(worst_buf, sizeof worst_buf, "%s (%s)", key, n->op->name);
					worst_where = worst_buf;
				}
			}
		}
		for (int i = 0; i < g->n_inputs; i++) {
			if (!C.din[i])
				continue;
			struct worst w = {0, 0, 0, -1, 0};
			compare(&C, C.in[i], C.din[i], dl_shape_numel(&g->values[i].shape),
				(int)samples, h, scale, &w);
			char key[300];
			snprintf(key, sizeof key, "input %s", g->inputs[i].name);
			printf("%-28s %-18s %12.3e %14.6g %14.6g", key, "-", w.err, w.analytic,
			       w.numeric);
			if (w.skipped)
				printf("  (%d at a kink, skipped)", w.skipped);
			putchar('\n');
			if (w.err > worst_all) {
				worst_all = w.err;
				snprintf(worst_buf, sizeof worst_buf, "%s", key);
				worst_where = worst_buf;
			}
		}
		printf("worst relative error: %.3e (tolerance %.1e)\n", worst_all, tol);
		fflush(stdout);
		if (worst_all > tol)
			rc = dl_error_set(err, DL_ERUN,
					  "gradcheck: the gradient of %s is off by %.3e relative "
					  "(tolerance %.1e)", worst_where, worst_all, tol);
	}
	for (int i = 0; g && C.in && i < g->n_inputs; i++) {
		free(C.in[i]);
		free(C.din[i]);
	}
	for (int k = 0; g && C.r && k < g->n_outputs; k++)
		free(C.r[k]);
	free(C.in);
	free(C.din);
	free(C.r);
	free(specs);
	dl_graph_free(g);
	return rc;
}

const struct verb verb_gradcheck = {
	"gradcheck",
	"check back-propagated gradients against finite differences",
	"usage: dlrun gradcheck MODEL.yaml [-w WEIGHTS] [--seed S] [--batch-size N]\n"
	"                      [--input-shape NAME=d,d...] [--tolerance T] [--step H]\n"
	"                      [--samples K]\n"
	"\n"
	"On a random batch (N(0, 1) inputs, batch 2), compares the gradient of\n"
	"L = sum(r * output), r fixed and random, with respect to every parameter\n"
	"and every float input, with central differences (L in double) at K\n"
	"random elements of each (default 12). The relative error is\n"
	"(|a - n| - s/2) / max(|a|, |n|, 1e-2 * the largest gradient), n the best\n"
	"of the central differences at steps H, H/3, H/10, H/30, H/100 (H = 1e-2)\n"
	"and s their\n"
	"spread (their own float32 noise), leaving out steps across a kink (relu\n"
	"at 0), where the one-sided differences disagree; an element at a kink for\n"
	"all three is skipped and counted. Prints the worst\n"
	"per parameter and input; exits 1 above the tolerance (default 1e-2).\n"
	"Dropout uses the same mask in every evaluation. --ignore-extra skips\n"
	"(and counts) keys of WEIGHTS the model does not use.\n",
	gradcheck_main,
};
