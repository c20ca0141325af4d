/* dlrun bench: times a model inside one process, as `caffe time` does:
 * start-up and loading on their own, then the median and spread of K
 * forward passes (or training steps) after a warm-up, and each entry's
 * share of the time. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/gemm.h"
#include "engine/xwt.h"
#include "train/step.h"
#include "verbs/verbs.h"

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Median of v[0..n) (sorts v). */
static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct bench {
	struct dl_graph *g;
	int train;
	float **in;           /* [n_inputs] random inputs */
	float **dout;         /* [n_outputs] the outputs' gradient slots in the
	                       * training plan's arena (training) */
	struct dl_optim opt;
	struct dl_step step;  /* the training step, seeded with dout */
	struct dl_rng rng;
	struct dl_xwt_set *xwt;   /* packed weights (verb_xwt), not training */
};

/* One timed iteration: a forward pass, or forward + backward + step. */
static int iterate(struct bench *B, struct dl_error *err)
{
	struct dl_ctx ctx = {.train = B->train, .rng = &B->rng,
			      .fixed_weights = !B->train, .fuse = B->g->fuse, .xwt = B->xwt};
	if (!B->train) {
		dl_step_forward(&B->step, B->in, &ctx);
		return 0;
	}
	/* no labels: a fixed output gradient, written after the forward
	 * into the plan's own slot for it (a logits-sized buffer of the
	 * bench's own would be memory the plan does not count), seeds
	 * backward */
	struct dl_batch b = {.n = 0, .in = B->in};
	double loss;
	int rc = dl_train_forward(&B->step, &b, 0, &ctx, &loss, err);
	if (rc)
		return rc;
	for (int k = 0; k < B->g->n_outputs; k++) {
		float *d = B->dout[k];
		int64_t n = dl_shape_numel(&B->g->values[B->g->outputs[k]].shape);
		for (int64_t j = 0; d && j < n; j++)
			d[j] = 1.0f / (float)n;
	}
	return dl_train_finish(&B->step, 1e-6, &ctx, &loss, err);
}

static int setup(struct bench *B, struct dl_error *err)
{
	struct dl_graph *g = B->g;
	g->fuse = !B->train && verb_fuse();   /* the weights are fixed */
	int rc = dl_graph_plan(g, B->train, err);
	if (rc == 0 && !B->train)
		B->xwt = verb_xwt(g);
	if (rc == 0 && B->train)
		rc = dl_graph_train_setup(g, err);
	if (rc == 0 && B->train) {
		struct dl_optim_config oc = dl_optim_defaults(DL_OPTIM_ADAM);
		struct dl_range all = {0, g->n_param_floats};
		rc = dl_optim_init(&B->opt, &oc, g->n_param_floats, &all, 1, err);
	}
	B->in = calloc((size_t)g->n_inputs + 1, sizeof *B->in);
	B->dout = calloc((size_t)g->n_outputs + 1, sizeof *B->dout);
	if (rc == 0 && (!B->in || !B->dout))
		rc = dl_error_set(err, DL_ERUN, "out of memory");
	B->step = (struct dl_step){.g = g, .dout = B->dout, .opt = B->train ? &B->opt : NULL};
	dl_rng_seed(&B->rng, 1);
	for (int i = 0; rc == 0 && i < g->n_inputs; i++) {
		int64_t n = dl_shape_numel(&g->values[i].shape);
		if (!(B->in[i] = malloc((size_t)(n + 1) * sizeof(float))))
			return dl_error_set(err, DL_ERUN, "out of memory");
		for (int64_t j = 0; j < n; j++)
			B->in[i][j] = g->inputs[i].is_int ? (float)dl_rng_below(&B->rng, 2)
							  : (float)dl_rng_normal(&B->rng);
	}
	for (int k = 0; rc == 0 && B->train && k < g->n_outputs; k++)
		B->dout[k] = dl_graph_output_grad(g, k);
	return rc;
}

static void free_bench(struct bench *B)
{
	for (int i = 0; B->in && B->g && i < B->g->n_inputs; i++)
		free(B->in[i]);
	free(B->in);
	free(B->dout);
	dl_optim_free(&B->opt);
	dl_xwt_set_free(B->xwt);
	dl_graph_free(B->g);
}

/* How many inner entries of composite n (a transformer layer, a mixture's
 * experts) run fused: the marks the plan set, which every bind keeps while
 * the fuse wish stays (it does through a bench), so a mixture's expert that
 * no token chose in the last forward counts as it would run. */
static int fused_inside(const struct dl_node *n)
{
	const struct dl_subgraphs *s = n->sub;
	int count = 0;
	for (int k = 0; s && k < s->n; k++)
		for (int j = 0; j < s->g[k]->n_nodes; j++)
			count += s->g[k]->nodes[j].fused != 0;
	return count;
}

static void report(const struct bench *B, const char *model, long long batch, int iters,
		   double startup, double *it_ms, double *node_ms, int json)
{
	const struct dl_graph *g = B->g;
	int n = g->n_nodes;
	double mn = it_ms[0], mx = it_ms[0];
	for (int k = 1; k < iters; k++) {
		mn = it_ms[k] < mn ? it_ms[k] : mn;
		mx = it_ms[k] > mx ? it_ms[k] : mx;
	}
	double med = median(it_ms, iters);
	/* per entry: median over the iterations, share of their sum */
	double *med_node = calloc((size_t)n + 1, sizeof *med_node);
	double total = 0;
	for (int i = 0; med_node && i < n; i++) {
		med_node[i] = median(node_ms + (size_t)i * iters, iters);
		total += med_node[i];
	}
	if (json) {
		json_t *entries = json_array();
		for (int i = 0; med_node && i < n; i++) {
			json_t *e = json_pack("{s:s, s:s, s:f, s:f}",
				"scope", g->nodes[i].scope, "op", g->nodes[i].op->name,
				"median_ms", med_node[i], "share", total > 0 ? med_node[i] / total : 0.0);
			/* computed by an earlier entry's fused epilogue */
			if (e && g->nodes[i].fused)
				json_object_set_new(e, "fused", json_true());
			/* a composite's inner entries that were */
			int inside = fused_inside(&g->nodes[i]);
			if (e && inside)
				json_object_set_new(e, "fused_inside", json_integer(inside));
			json_array_append_new(entries, e);
		}
		json_t *o = json_pack("{s:s, s:I, s:i, s:i, s:b, s:f, s:f, s:f, s:f, s:o}",
			"model", g->name ? g->name : model, "batch", (json_int_t)batch,
			"threads", dl_threads(), "iterations", iters, "train", B->train,
			"startup_ms", startup, "median_ms", med, "min_ms", mn, "max_ms", mx,
			"entries", entries);
		char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
		if (s)
			puts(s);
		free(s);
		json_decref(o);
	} else {
		printf("model %s, batch %lld, %d thread%s, %d iterations of %s\n",
		       g->name ? g->name : model, batch, dl_threads(), dl_threads() == 1 ? "" : "s",
		       iters, B->train ? "forward + backward + adam step" : "forward");
		printf("start-up and loading: %.3f ms\n", startup);
		printf("per iteration: median %.3f ms, min %.3f ms, max %.3f ms\n\n", med, mn, mx);
		printf("%-24s %-20s %12s %8s\n", "entry", "op", "median ms", "share");
		for (int i = 0; med_node && i < n; i++)
			if (g->nodes[i].fused)
				printf("%-24s %-20s %12s\n", g->nodes[i].scope, g->nodes[i].op->name,
				       "(fused)");
			else
				printf("%-24s %-20s %12.4f %7.1f%%\n", g->nodes[i].scope,
				       g->nodes[i].op->name, med_node[i],
				       total > 0 ? 100 * med_node[i] / total : 0.0);
	}
	free(med_node);
}

static int bench_main(int argc, char **argv, struct dl_error *err)
{
	int64_t filled = 0;   /* a symbolic size verb_infer_shapes_as took */
	double t_start = now_ms();
	static const struct option opts[] = {
		{"weights", required_argument, NULL, 'w'},
		{"batch-size", required_argument, NULL, 'b'},
		{"iterations", required_argument, NULL, 'k'},
		{"train", no_argument, NULL, 'T'},
		{"threads", required_argument, NULL, 't'},
		{"input-shape", required_argument, NULL, 'I'},
		{"json", no_argument, NULL, 'j'},
		{"ignore-extra", no_argument, NULL, 'X'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *wflag = NULL, *model = NULL, *threads = NULL;
	long long batch = 1, iters = 20;
	int json = 0, rc = 0, ch, n_specs = 0, ignore_extra = 0;
	struct bench B;
	memset(&B, 0, sizeof B);
	char **specs = calloc((size_t)argc + 1, sizeof *specs);
	if (!specs)
		return dl_error_set(err, DL_ERUN, "out of memory");
	opterr = 0;
	while (rc == 0 && (ch = getopt_long(argc, argv, ":w:b:k:t:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'w':
			wflag = optarg;
			break;
		case 'X':
			ignore_extra = 1;
			break;
		case 'b':
			rc = verb_int("bench", "--batch-size", optarg, 1, 1 << 24, &batch, err);
			break;
		case 'k':
			rc = verb_int("bench", "--iterations", optarg, 1, 1000000, &iters, err);
			break;
		case 'T':
			B.train = 1;
			break;
		case 't':
			threads = optarg;
			break;
		case 'I':
			specs[n_specs++] = optarg;
			break;
		case 'j':
			json = 1;
			break;
		case 'h':
			verb_usage(&verb_bench);
			free(specs);
			return 0;
		default:
			rc = verb_bad_option("bench", ch, argv, err);
		}
	}
	if (rc == 0)
		rc = verb_model_arg("bench", argc, argv, &model, err);
	if (rc == 0)
		rc = verb_threads("bench", threads, err);
	if (rc == 0)
		rc = dl_model_load(&B.g, model, err);
	if (rc == 0)
		rc = verb_infer_shapes_as(B.g, specs, n_specs, batch, &filled, err);
	if (rc == 0)
		verb_note_filled(B.g, n_specs, filled);
	if (rc == 0) {
		/* -w, else the default weights when they exist, else fresh ones:
		 * timing needs no trained values */
		char *path = wflag ? NULL : dl_model_default_weights(B.g);
		if (wflag || (path && access(path, F_OK) == 0))
			rc = verb_load_weights(B.g, wflag, ignore_extra, err);
		else
			dl_graph_init_params(B.g, 0);
		free(path);
	}
	if (rc == 0)
		rc = setup(&B, err);
	double startup = now_ms() - t_start;
	double *it_ms = NULL, *node_ms = NULL;
	if (rc == 0) {
		int n = B.g->n_nodes;
		it_ms = calloc((size_t)iters, sizeof *it_ms);
		node_ms = calloc((size_t)iters * (size_t)(n ? n : 1), sizeof *node_ms);
		B.g->prof = calloc((size_t)(n ? n : 1), sizeof *B.g->prof);
		if (!it_ms || !node_ms || !B.g->prof)
			rc = dl_error_set(err, DL_ERUN, "out of memory");
	}
	if (rc == 0) {
		int warm = iters < 3 ? 1 : 3;
		for (int k = 0; rc == 0 && k < warm; k++)
			rc = iterate(&B, err);
		for (int k = 0; rc == 0 && k < iters; k++) {
			memset(B.g->prof, 0, (size_t)B.g->n_nodes * sizeof *B.g->prof);
			double t0 = now_ms();
			rc = iterate(&B, err);
			it_ms[k] = now_ms() - t0;
			for (int i = 0; i < B.g->n_nodes; i++)
				node_ms[(size_t)i * iters + k] = B.g->prof[i] * 1e3;
		}
	}
	if (rc == 0) {
		report(&B, model, batch, (int)iters, startup, it_ms, node_ms, json);
		if (fflush(stdout) != 0)
			rc = dl_error_set(err, DL_ERUN, "stdout: write failed");
	}
	free(it_ms);
	free(node_ms);
	free(specs);
	free_bench(&B);
	return rc;
}

const struct verb verb_bench = {
	"bench",
	"time a model's forward pass (or training step) in process",
	"usage: dlrun bench MODEL.yaml [-w WEIGHTS] [--batch-size N] [--iterations K]\n"
	"                  [--train] [--threads N] [--input-shape NAME=d,d...] [--json]\n"
	"\n"
	"Times K iterations (default 20, after a warm-up of 3) of a forward pass\n"
	"on a random batch of N samples (default 1), or with --train of forward,\n"
	"backward and an Adam step; prints start-up and loading time, the median,\n"
	"minimum and maximum per iteration, and each entry's median time and share.\n"
	"Weights: -w, else the model's default weights file when it exists, else\n"
	"fresh ones (timing needs no trained values).\n"
	"\n"
	"  -w, --weights PATH     weights to load (their loading is timed too)\n"
	"      --ignore-extra     skip (and count) weights the model does not use\n"
	"  -b, --batch-size N     samples per iteration (default 1)\n"
	"  -k, --iterations K     timed iterations (default 20)\n"
	"      --train            time forward + backward + optimizer step\n"
	"  -t, --threads N        BLAS and op threads (default: all cores)\n"
	"      --input-shape NAME=d1,d2,...  per-sample sizes for symbolic inputs\n"
	"      --json             one JSON object instead of the table\n"
	"  -h, --help             this help\n",
	bench_main,
};
