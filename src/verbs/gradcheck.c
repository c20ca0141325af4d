/* dlrun gradcheck: back-propagated gradients against finite
 * differences of L = sum(r * output) (plus auxiliary losses, such as
 * mixture_of_experts' balance_loss) for a fixed random r, accumulated in
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
	uint64_t sides;      /* hash of the side of every kink in the last
	                      * forward */
	double sigma;        /* the largest float32 noise of L found so far */
};

/* Ops whose derivative jumps where the output leaves the input (relu,
 * leaky_relu, abs at 0; relu6, clamp at their bounds) or sticks to 0 or 1
 * (relu, hardswish and hardsigmoid below -3, hardsigmoid above 3): their
 * descriptors say DL_OP_KINKED. The side of each element is (y == x) +
 * 2 (y == 0) + 4 (y == 1), and two evaluations on the same side of every
 * kink have the same hash. */

static void kink_sides(void *arg, const struct dl_node *n, const struct dl_tensor *in,
		       const struct dl_tensor *out)
{
	struct check *C = arg;
	if (!(n->op->flags & DL_OP_KINKED) || n->n_in < 1 ||
	    dl_shape_numel(&in[0].shape) != dl_shape_numel(&out->shape))
		return;
	uint64_t h = C->sides;
	for (int64_t j = 0; j < dl_shape_numel(&out->shape); j++) {
		float x = in[0].data[j], y = out->data[j];
		unsigned side = (y == x) + 2u * (y == 0) + 4u * (y == 1);
		h = (h ^ side) * 0x100000001b3ull;
	}
	C->sides = h;
}

/* L = sum_k sum_j r_k[j] out_k[j] plus the forward's auxiliary losses, in
 * double; *sides receives the hash of
 * the kinks' sides. */
static double objective(struct check *C, int train, uint64_t *sides)
{
	double aux = 0;  /* auxiliary losses (balance_loss) are part of L */
	struct dl_ctx ctx = {.train = train, .rng = &C->rng,
			     .aux_loss = &aux};
	dl_rng_seed(&C->rng, C->seed + 17);
	C->sides = 0xcbf29ce484222325ull;
	dl_step_forward(&C->step, C->in, &ctx);
	if (sides)
		*sides = C->sides;
	double L = aux;
	for (int k = 0; k < C->g->n_outputs; k++) {
		const struct dl_value *v = &C->g->values[C->g->outputs[k]];
		int64_t n = dl_shape_numel(&v->shape);
		for (int64_t j = 0; j < n; j++)
			L += (double)C->r[k][j] * v->data[j];
	}
	return L;
}

/* Finite differences of L along x[j] at the steps h, h/3, h/10, h/30,
 * h/100. Large steps suffer from curvature, small ones from float32
 * rounding of the outputs. A kink is found element by element: an
 * evaluation that puts some element of a relu-like op on the other side of
 * its kink than at x changes the hash of the sides. A step with a kink on
 * one side only uses the difference on the other side; with kinks on both
 * sides it is left out. A kink the hash cannot see (a max switching) makes
 * the two one-sided differences disagree: such a step is left out too.
 * Writes the estimates to est[], their noise (float32 rounding of L, sigma,
 * over the step; for a central difference also the half-difference of its
 * one-sided halves) to unc[], and returns how many there are. */
#define N_STEPS 5
#define N_EST N_STEPS

static int numeric(struct check *C, float *x, double h, double scale, double sigma,
		   double est[N_EST], double unc[N_EST])
{
	static const double frac[N_STEPS] = {1, 1.0 / 3, 0.1, 1.0 / 30, 0.01};
	float keep = *x;
	uint64_t s0, su, sd;
	double f0 = objective(C, 1, &s0);
	int n = 0;
	for (int t = 0; t < N_STEPS; t++) {
		double ht = h * frac[t];
		*x = (float)(keep + ht);
		double hp = (double)*x - keep;
		double up = objective(C, 1, &su);
		*x = (float)(keep - ht);
		double hm = keep - (double)*x;
		double down = objective(C, 1, &sd);
		*x = keep;
		double right = (up - f0) / hp, left = (f0 - down) / hm;
		if (su != s0 && sd != s0)
			continue;
		if (su != s0 || sd != s0) {
			/* the smooth side's difference, with the float32 noise of
			 * two evaluations over one step; its curvature error
			 * shows in the estimates' spread over the steps */
			unc[n] = M_SQRT2 * sigma / ht;
			est[n++] = su != s0 ? left : right;
			continue;
		}
		if (fabs(right - left) <= 0.5 * fmax(fmax(fabs(right), fabs(left)), scale)) {
			unc[n] = fmax(fabs(right - left) / 2, M_SQRT1_2 * sigma / ht);
			est[n++] = (up - down) / (hp + hm);
		}
	}
	return n;
}

struct worst {
	double err;       /* |a - n| / max(|a|, |n|, scale) */
	double noise;     /* the estimates' half-spread, on the same scale */
	double analytic, numeric;
	int64_t at;
	int skipped;      /* elements at a kink for every step */
};

/* The excess of an error over its noise: what the tolerance bounds. */
static double excess(const struct worst *w)
{
	return fmax(w->err - w->noise, 0);
}

/* The float32 noise of L when an element of x moves: at up to 8 elements,
 * the second difference |L(x + d) - 2 L(x) + L(x - d)| at d = h/1000, where
 * curvature adds nothing visible, is three evaluations' rounding; the
 * largest, halved. Steps that cross a kink are passed over; when every one
 * does, the largest noise found for an earlier tensor stands in. */
static double float_noise(struct check *C, float *x, int64_t n, double h)
{
	struct dl_rng pick;
	dl_rng_seed(&pick, C->seed + (uint64_t)n + 1);
	double sigma = -1;
	for (int s = 0; s < 8 && s < n; s++) {
		float *e = &x[n <= 8 ? s : (int64_t)dl_rng_below(&pick, (uint64_t)n)];
		float keep = *e;
		uint64_t s0, su, sd;
		double f0 = objective(C, 1, &s0);
		*e = (float)(keep + h / 1000);
		double up = objective(C, 1, &su);
		*e = (float)(keep - h / 1000);
		double down = objective(C, 1, &sd);
		*e = keep;
		if (su == s0 && sd == s0)
			sigma = fmax(sigma, fabs(up - 2 * f0 + down) / 2);
	}
	if (sigma < 0)
		return C->sigma;
	C->sigma = fmax(C->sigma, sigma);
	return sigma;
}

/* Compares up to `samples` elements of x (gradient ga) chosen at random;
 * `rows` elements per row of a parameter whose row `skip_row` has no
 * gradient by design (embedding's padding_idx; -1: none) are not drawn. */
static void compare(struct check *C, float *x, const float *ga, int64_t n, int samples,
		    int64_t skip_row, int64_t row, double h, double scale, struct worst *w)
{
	struct dl_rng pick;
	dl_rng_seed(&pick, C->seed + (uint64_t)n);
	int64_t avail = n - (skip_row >= 0 ? row : 0);
	int done = 0;
	double sigma = float_noise(C, x, n, h);
	for (int64_t s = 0; done < samples && s < avail && s < 4 * (int64_t)samples; s++) {
		int64_t j = avail <= samples ? s : (int64_t)dl_rng_below(&pick, (uint64_t)avail);
		if (skip_row >= 0 && j >= skip_row * row)
			j += row;
		double a = ga[j], est[N_EST], unc[N_EST];
		int k = numeric(C, &x[j], h, scale, sigma, est, unc);
		if (k < 2) {
			w->skipped++;
			continue;
		}
		done++;
		/* the estimates' own spread over the steps measures their noise
		 * (float32 outputs) and curvature error: a disagreement within
		 * it says nothing, while a wrong gradient lies far outside it */
		double lo = est[0], hi = est[0];
		for (int t = 1; t < k; t++) {
			lo = fmin(lo, est[t]);
			hi = fmax(hi, est[t]);
		}
		/* and each estimate is as noisy as its own step says (unc) */
		struct worst best = {INFINITY, 0, a, 0, j, 0};
		for (int t = 0; t < k; t++) {
			double den = fmax(fmax(fabs(a), fabs(est[t])), scale);
			double noise = fmax((hi - lo) / 2, unc[t]);
			struct worst c = {fabs(a - est[t]) / den, noise / den, a, est[t], j, 0};
			if (excess(&c) < excess(&best) ||
			    (excess(&c) == excess(&best) && c.err < best.err))
				best = c;
		}
		best.skipped = w->skipped;
		if (w->at < 0 || excess(&best) > excess(w) ||
		    (excess(&best) == excess(w) && best.err > w->err))
			*w = best;
	}
}

static void print_row(const char *key, const char *op, const struct worst *w)
{
	if (w->at < 0)   /* nothing compared: no numbers to show */
		printf("%-28s %-18s %10s %10s %14s %14s", key, op, "-", "-", "-", "-");
	else
		printf("%-28s %-18s %10.3e %10.3e %14.6g %14.6g", key, op, w->err, w->noise,
		       w->analytic, w->numeric);
	if (w->skipped)
		printf("  (%d at a kink, skipped%s)", w->skipped,
		       w->at < 0 ? "; none compared" : "");
}

/* The id range an int input's consumers accept: an embedding's
 * num_embeddings (DL_OP_IDS: ids past it are errors); else 4. */
static uint64_t id_range(const struct dl_graph *g, int v)
{
	uint64_t r = 0;
	for (int i = 0; i < g->n_nodes; i++) {
		const struct dl_node *n = &g->nodes[i];
		if (n->n_in > 0 && n->in[0] == v && (n->op->flags & DL_OP_IDS) &&
		    n->n_params > 0 && (r == 0 || (uint64_t)n->params[0].shape.d[0] < r))
			r = (uint64_t)n->params[0].shape.d[0];
	}
	return r ? r : 4;
}

/* An input that is some graph_conv's adjacency (DL_OP_ADJACENCY): drawn
 * from U(0, 1), as a
 * graph's weights are (an N(0, 1) adjacency has degrees near 0, where
 * D^-1/2 is steep and float32 differences meaningless). */
static int is_adjacency(const struct dl_graph *g, int v)
{
	for (int i = 0; i < g->n_nodes; i++) {
		const struct dl_node *n = &g->nodes[i];
		if (n->n_in > 1 && n->in[1] == v && (n->op->flags & DL_OP_ADJACENCY))
			return 1;
	}
	return 0;
}

static int gradcheck_main(int argc, char **argv, struct dl_error *err)
{
	int64_t filled = 0;   /* a symbolic size verb_infer_shapes_as took */
	static const struct option opts[] = {
		{"weights", required_argument, NULL, 'w'},
		{"seed", required_argument, NULL, 's'},
		{"batch-size", required_argument, NULL, 'b'},
		{"input-shape", required_argument, NULL, 'I'},
		{"tolerance", required_argument, NULL, 'T'},
		{"step", required_argument, NULL, 'E'},
		{"samples", required_argument, NULL, 'n'},
		{"ignore-extra", no_argument, NULL, 'X'},
		{"threads", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *wflag = NULL, *model = NULL, *threads = NULL;
	long long seed = 0, batch = 2, samples = 12;
	double tol = 1e-2, h = 1e-2;
	int rc = 0, ch, n_specs = 0, ignore_extra = 0;
	char **specs = calloc((size_t)argc + 1, sizeof *specs);
	if (!specs)
		return dl_error_set(err, DL_ERUN, "out of memory");
	opterr = 0;
	while (rc == 0 && (ch = getopt_long(argc, argv, ":w:s:b:t:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'w':
			wflag = optarg;
			break;
		case 'X':
			ignore_extra = 1;
			break;
		case 't':
			threads = optarg;
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
	/* one thread by default: a sum shared among threads may round
	 * otherwise, and L's differences are of that order, so the numbers
	 * would depend on the machine */
	if (rc == 0)
		rc = verb_threads("gradcheck", threads ? threads : "1", err);
	if (rc == 0)
		rc = verb_model_arg("gradcheck", argc, argv, &model, err);
	if (rc == 0)
		rc = dl_model_load(&C.g, model, err);
	if (rc == 0)
		rc = verb_infer_shapes_as(C.g, specs, n_specs, batch, &filled, err);
	if (rc == 0)
		verb_note_filled(C.g, n_specs, filled);
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
		uint64_t ids = g->inputs[i].is_int ? id_range(g, i) : 0;
		int adj = is_adjacency(g, i);
		for (int64_t j = 0; j < n; j++)
			C.in[i][j] = ids ? (float)dl_rng_below(&data, ids)
			       : adj ? (float)dl_rng_uniform(&data)
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
		struct dl_ctx ctx = {.train = 1, .rng = &C.rng};
		C.step = (struct dl_step){.g = g, .dout = C.r};
		g->on_forward = kink_sides;
		g->on_forward_arg = &C;
		objective(&C, 1, NULL);
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
		printf("%-28s %-18s %10s %10s %14s %14s\n", "gradient of", "op", "rel. error",
		       "noise", "analytic", "numeric");
		for (int i = 0; i < g->n_nodes; i++) {
			struct dl_node *n = &g->nodes[i];
			for (int k = 0; k < n->n_params; k++) {
				struct dl_param *p = &n->params[k];
				if (p->buffer || p->tie)   /* a tied one: its owner's row */
					continue;
				struct worst w = {0, 0, 0, 0, -1, 0};
				int64_t numel = dl_shape_numel(&p->shape);
				int64_t zr = p->init_zero_row, row = 0;
				if (zr >= 0 && p->shape.ndim > 0 && zr < p->shape.d[0])
					row = numel / p->shape.d[0];
				else
					zr = -1;
				compare(&C, p->data, p->grad, numel, (int)samples, zr, row, h, scale,
					&w);
				char key[512];
				dl_param_key(n, p, key, sizeof key);
				print_row(key, n->op->name, &w);
				if (zr >= 0)
					printf("  (row %lld has no gradient by design, skipped)",
					       (long long)zr);
				putchar('\n');
				if (excess(&w) > worst_all) {
					worst_all = excess(&w);
					snprintf(worst_buf, sizeof worst_buf, "%s (%s)", key, n->op->name);
					worst_where = worst_buf;
				}
			}
		}
		for (int i = 0; i < g->n_inputs; i++) {
			if (!C.din[i])
				continue;
			struct worst w = {0, 0, 0, 0, -1, 0};
			compare(&C, C.in[i], C.din[i], dl_shape_numel(&g->values[i].shape),
				(int)samples, -1, 0, h, scale, &w);
			char key[300];
			snprintf(key, sizeof key, "input %s", g->inputs[i].name);
			print_row(key, "-", &w);
			putchar('\n');
			if (excess(&w) > worst_all) {
				worst_all = excess(&w);
				snprintf(worst_buf, sizeof worst_buf, "%s", key);
				worst_where = worst_buf;
			}
		}
		printf("worst relative error beyond noise: %.3e (tolerance %.1e)\n", worst_all, tol);
		fflush(stdout);
		if (worst_all > tol)
			rc = dl_error_set(err, DL_ERUN,
					  "gradcheck: the gradient of %s is off by %.3e relative "
					  "beyond noise (tolerance %.1e)", worst_where, worst_all, tol);
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
	"                      [--samples K] [--threads N]\n"
	"\n"
	"On a random batch (batch 2; inputs N(0, 1), a graph_conv adjacency\n"
	"U(0, 1), int ids uniform below an embedding's num_embeddings, else 4),\n"
	"compares the gradient a of L = sum(r * output) (plus auxiliary losses:\n"
	"a mixture_of_experts' balance_loss), r fixed and random, with respect\n"
	"to every parameter and every float input, with differences n of L (in\n"
	"double) at K random elements of each (default 12), at steps H, H/3,\n"
	"H/10, H/30, H/100 (H = 1e-2). A step that moves an element of a\n"
	"relu-like op across its kink on one side uses the one-sided difference\n"
	"of the other side; a step with kinks on both sides, or whose one-sided\n"
	"differences disagree, is left out; an element with fewer than two steps\n"
	"left is skipped, counted, and replaced. Embedding's padding_idx row (no\n"
	"gradient by design) is skipped and said so. Per parameter and input it\n"
	"prints the relative error e = |a - n| / max(|a|, |n|, 1e-2 * the largest\n"
	"gradient), n the estimate nearest a beyond its noise, and the noise s\n"
	"on the same scale: the larger of the estimates' half-spread and n's own\n"
	"noise: for a central difference at step h the larger of its one-sided\n"
	"halves' half-difference and sigma/(h sqrt 2), for a one-sided one\n"
	"sigma sqrt 2/h; sigma, the float32 noise of L, is half the largest\n"
	"|L(x+d) - 2 L(x) + L(x-d)| at d = H/1000 over up to 8 elements of the\n"
	"tensor (without a kink). Exits 1 when e - s exceeds the\n"
	"tolerance (default 1e-2). Dropout uses the same mask in every evaluation.\n"
	"--ignore-extra skips (and counts) keys of WEIGHTS the model does not use.\n"
	"-t, --threads N sets the BLAS and op threads (default 1, so that the\n"
	"numbers do not depend on the machine).\n",
	gradcheck_main,
};
