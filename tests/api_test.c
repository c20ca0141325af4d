/* libdlrun through its public header only (tests/api.sh runs it):
 *   api_test run MODEL INPUT.txt     prints the outputs as dlrun infer
 *                                    --format text would
 *   api_test threads MLP LENET       two models open at once, each run 40
 *                                    times on its own thread with two
 *                                    compute threads: same answers each time
 *   api_test errors MODEL            wrong shapes and counts are errors
 *                                    with messages, not crashes
 *   api_test train MODEL OUT         a run, then SGD steps, weights saved,
 *                                    reopened
 *   api_test batch X.npy Y.npy       writes train's batch (inputs [4, 16],
 *                                    class ids [4]) for `dlrun train`
 *   api_test resave MODEL IN OUT     opens MODEL with weights IN and saves
 *                                    them as dlrun_save_weights writes
 *   api_test runsave MODEL OUT       runs train's batch, saves the weights
 *                                    (packed by the run: rows again in
 *                                    the file), runs it again: the same
 *                                    bytes as the first run
 *   api_test shapes MLP SYMBOLIC     dlrun_output_shape before and after a
 *                                    run (SYMBOLIC: input [T, 4], output
 *                                    [T, 3]); dlrun_set_threads(m, 0) gives
 *                                    one thread's numbers
 * Exit 0 on success; failures print one line on stderr. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrun.h"

#define FAIL(...) do { fprintf(stderr, "api_test: " __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

static float *read_text(const char *path, int64_t *n)
{
	FILE *f = fopen(path, "r");
	if (!f)
		FAIL("%s: cannot open", path);
	float *x = NULL, v;
	int64_t cap = 0;
	*n = 0;
	char line[65536];
	while (fgets(line, sizeof line, f)) {
		if (line[0] == '#')
			continue;
		char *s = line, *end;
		for (v = strtof(s, &end); end != s; v = strtof(s, &end)) {
			if (*n == cap) {
				cap = cap ? 2 * cap : 256;
				x = realloc(x, (size_t)cap * sizeof *x);
			}
			x[(*n)++] = v;
			s = end;
		}
	}
	fclose(f);
	return x;
}

static dlrun_model *open_or_die(const char *path, const char *weights)
{
	struct dlrun_error e;
	dlrun_model *m;
	if (dlrun_open(&m, path, weights, &e) != 0)
		FAIL("%s: %s", path, e.message);
	return m;
}

/* in: one input of per-sample size D, n/D samples */
static struct dlrun_tensor input_of(dlrun_model *m, float *x, int64_t n)
{
	int64_t per[DLRUN_MAX_DIMS], D = 1;
	int r = dlrun_input_shape(m, 0, per, DLRUN_MAX_DIMS);
	struct dlrun_tensor t = {.data = x, .ndim = r + 1};
	for (int d = 0; d < r; d++) {
		D *= per[d];
		t.dims[d + 1] = per[d];
	}
	t.dims[0] = n / D;
	return t;
}

static int cmd_run(const char *model, const char *input)
{
	int64_t n;
	float *x = read_text(input, &n);
	dlrun_model *m = open_or_die(model, NULL);
	struct dlrun_tensor in = input_of(m, x, n), out = {0};
	struct dlrun_error e;
	if (dlrun_run(m, &in, 1, &out, 1, &e) != 0)
		FAIL("run: %s", e.message);
	int64_t per = 1;
	for (int d = 1; d < out.ndim; d++)
		per *= out.dims[d];
	for (int64_t i = 0; i < out.dims[0]; i++)
		for (int64_t j = 0; j < per; j++)
			printf(j + 1 < per ? "%.9g " : "%.9g\n", (double)out.data[i * per + j]);
	dlrun_close(m);
	free(x);
	return 0;
}

struct job {
	dlrun_model *m;
	int64_t numel;
	int bad;
};

static void *worker(void *arg)
{
	struct job *j = arg;
	float *x = calloc((size_t)j->numel, sizeof *x);
	for (int64_t i = 0; i < j->numel; i++)
		x[i] = (float)((i * 7919) % 13) / 13.0f - 0.5f;
	struct dlrun_tensor in = input_of(j->m, x, j->numel);
	struct dlrun_error e;
	float *first = NULL;
	size_t cnt = 0;
	if (dlrun_set_threads(j->m, 2, &e) != 0)
		j->bad = 1;
	for (int it = 0; it < 40 && !j->bad; it++) {
		struct dlrun_tensor out = {0};
		if (dlrun_run(j->m, &in, 1, &out, 1, &e) != 0) {
			fprintf(stderr, "api_test: %s\n", e.message);
			j->bad = 1;
			break;
		}
		size_t c = 1;
		for (int d = 0; d < out.ndim; d++)
			c *= (size_t)out.dims[d];
		if (!first) {
			first = malloc(c * sizeof *first);
			memcpy(first, out.data, c * sizeof *first);
			cnt = c;
		} else if (c != cnt || memcmp(first, out.data, c * sizeof *first) != 0) {
			j->bad = 2;
		}
	}
	free(first);
	free(x);
	return NULL;
}

static int cmd_threads(const char *a, const char *b)
{
	struct job j[2] = {{open_or_die(a, NULL), 5 * 16, 0}, {open_or_die(b, NULL), 5 * 28 * 28, 0}};
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, worker, &j[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 2; i++) {
		if (j[i].bad)
			FAIL("model %d on its own thread: %s", i,
			     j[i].bad == 2 ? "answers changed between runs" : "a run failed");
		dlrun_close(j[i].m);
	}
	printf("two models on two threads: same answers\n");
	return 0;
}

static void expect_error(int rc, const struct dlrun_error *e, int code, const char *needle)
{
	if (rc != code || e->code != code || !strstr(e->message, needle))
		FAIL("expected error %d containing '%s', got %d: '%s'", code, needle, rc, e->message);
	printf("error: %s\n", e->message);
}

static int cmd_errors(const char *model)
{
	struct dlrun_error e;
	dlrun_model *m = NULL;
	expect_error(dlrun_open(&m, "/nonexistent/model.yaml", NULL, &e), &e, DLRUN_EINPUT,
		     "/nonexistent/model.yaml");
	if (m)
		FAIL("a failed open left a model");
	expect_error(dlrun_open(&m, model, "/nonexistent/w.safetensors", &e), &e, DLRUN_EINPUT,
		     "/nonexistent/w.safetensors");
	m = open_or_die(model, NULL);
	float x[3 * 5] = {0};
	struct dlrun_tensor in = {.data = x, .ndim = 2, .dims = {3, 5}}, out = {0};
	expect_error(dlrun_run(m, &in, 1, &out, 1, &e), &e, DLRUN_EINPUT, "'x'");
	expect_error(dlrun_run(m, &in, 2, &out, 1, &e), &e, DLRUN_EINPUT, "2 given");
	float small[2];
	struct dlrun_tensor in16 = {.data = calloc(48, sizeof(float)), .ndim = 2, .dims = {3, 16}};
	struct dlrun_tensor o2 = {.data = small, .capacity = 2};
	expect_error(dlrun_run(m, &in16, 1, &o2, 1, &e), &e, DLRUN_EINPUT, "room for 12");
	expect_error(dlrun_train_step(m, &in16, 1, &in16, NULL, &e), &e, DLRUN_EINPUT,
		     "dlrun_train_begin");
	struct dlrun_train_options o = {.optimizer = "adagrad"};
	expect_error(dlrun_train_begin(m, &o, &e), &e, DLRUN_EINPUT, "adagrad");
	if (dlrun_n_inputs(m) != 1 || strcmp(dlrun_input_name(m, 0), "x") != 0 ||
	    dlrun_input_name(m, 1) != NULL)
		FAIL("input names");
	free(in16.data);
	dlrun_close(m);
	dlrun_close(NULL);
	return 0;
}

/* train's batch: 4 samples of 16 features, classes 0 to 3 */
static void train_batch(float x[4 * 16], float y[4])
{
	for (int i = 0; i < 64; i++)
		x[i] = (float)(i % 9) / 9.0f - 0.4f;
	for (int i = 0; i < 4; i++)
		y[i] = (float)i;
}

/* A version 1.0 .npy of n elements of size bytes, descr '<f4' or '<i8',
 * shape "(4, 16)" or "(4,)". */
static void write_npy(const char *path, const char *descr, const char *shape,
		      const void *data, size_t size, size_t n)
{
	char h[128];
	int len = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, "
			   "'shape': %s, }", descr, shape);
	int total = (10 + len + 1 + 63) / 64 * 64;   /* magic, version, length, header, '\n' */
	memset(h + len, ' ', (size_t)(total - 10 - len - 1));
	h[total - 11] = '\n';
	FILE *f = fopen(path, "wb");
	if (!f)
		FAIL("%s: cannot write", path);
	unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
				 (unsigned char)((total - 10) & 0xff), (unsigned char)((total - 10) >> 8)};
	if (fwrite(pre, 1, 10, f) != 10 || fwrite(h, 1, (size_t)(total - 10), f) != (size_t)(total - 10) ||
	    fwrite(data, size, n, f) != n || fclose(f) != 0)
		FAIL("%s: cannot write", path);
}

static int cmd_batch(const char *xpath, const char *ypath)
{
	float x[4 * 16], y[4];
	int64_t ids[4];
	train_batch(x, y);
	for (int i = 0; i < 4; i++)
		ids[i] = (int64_t)y[i];
	write_npy(xpath, "<f4", "(4, 16)", x, sizeof *x, 64);
	write_npy(ypath, "<i8", "(4,)", ids, sizeof *ids, 4);
	return 0;
}

static int cmd_resave(const char *model, const char *in, const char *out)
{
	dlrun_model *m = open_or_die(model, in);
	struct dlrun_error e;
	if (dlrun_save_weights(m, out, &e))
		FAIL("save: %s", e.message);
	dlrun_close(m);
	return 0;
}

static int cmd_runsave(const char *model, const char *out)
{
	dlrun_model *m = open_or_die(model, NULL);
	float x[4 * 16], y[4], o1[4 * 4], o2[4 * 4];
	train_batch(x, y);
	struct dlrun_tensor in = {.data = x, .ndim = 2, .dims = {4, 16}};
	struct dlrun_tensor r1 = {.data = o1, .capacity = 16}, r2 = {.data = o2, .capacity = 16};
	struct dlrun_error e;
	if (dlrun_run(m, &in, 1, &r1, 1, &e) || dlrun_save_weights(m, out, &e) ||
	    dlrun_run(m, &in, 1, &r2, 1, &e))
		FAIL("runsave: %s", e.message);
	if (memcmp(o1, o2, sizeof o1) != 0)
		FAIL("runsave: the run after the save gives other bytes");
	dlrun_close(m);
	return 0;
}

static int cmd_train(const char *model, const char *out)
{
	dlrun_model *m = open_or_die(model, NULL);
	float x[4 * 16], y[4];
	train_batch(x, y);
	struct dlrun_tensor in = {.data = x, .ndim = 2, .dims = {4, 16}};
	struct dlrun_tensor lab = {.data = y, .ndim = 1, .dims = {4}};
	struct dlrun_error e;
	struct dlrun_train_options o = {.optimizer = "sgd", .lr = 0.5};
	double l0, l1;
	/* a run first: it packs the linear weights, which the first step
	 * must find as rows again (dlrun train never ran one) */
	float r[4 * 4];
	struct dlrun_tensor out0 = {.data = r, .capacity = 16};
	if (dlrun_run(m, &in, 1, &out0, 1, &e))
		FAIL("run: %s", e.message);
	if (dlrun_train_begin(m, &o, &e) || dlrun_train_step(m, &in, 1, &lab, &l0, &e) ||
	    dlrun_train_step(m, &in, 1, &lab, &l1, &e))
		FAIL("train: %s", e.message);
	if (!(l1 < l0))
		FAIL("the loss did not go down: %g then %g", l0, l1);
	y[0] = 9;
	expect_error(dlrun_train_step(m, &in, 1, &lab, NULL, &e), &e, DLRUN_EINPUT, "9");
	if (dlrun_save_weights(m, out, &e))
		FAIL("save: %s", e.message);
	dlrun_close(m);
	m = open_or_die(model, out);
	dlrun_close(m);
	printf("loss %.6f then %.6f\n", l0, l1);
	return 0;
}

/* The output's per-sample shape, as a string, "[4]" or "[-1, 3]". */
static const char *out_shape(const dlrun_model *m, int k, char *buf, size_t size)
{
	int64_t d[DLRUN_MAX_DIMS];
	int r = dlrun_output_shape(m, k, d, DLRUN_MAX_DIMS);
	if (r < 0)
		return "error";
	size_t used = (size_t)snprintf(buf, size, "[");
	for (int i = 0; i < r && used < size; i++)
		used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "",
					 (long long)d[i]);
	if (used < size)
		snprintf(buf + used, size - used, "]");
	return buf;
}

/* Runs m on n samples of a fixed ramp; returns the outputs (the caller
 * frees them) and their count. */
static float *run_ramp(dlrun_model *m, int64_t n, size_t *count)
{
	int64_t per[DLRUN_MAX_DIMS], D = 1;
	int r = dlrun_input_shape(m, 0, per, DLRUN_MAX_DIMS);
	for (int i = 0; i < r; i++)
		D *= per[i];
	float *x = malloc((size_t)(n * D) * sizeof *x);
	for (int64_t i = 0; i < n * D; i++)
		x[i] = (float)(i % 11) / 11.0f - 0.5f;
	struct dlrun_tensor in = input_of(m, x, n * D), out = {0};
	struct dlrun_error e;
	if (dlrun_run(m, &in, 1, &out, 1, &e) != 0)
		FAIL("run: %s", e.message);
	*count = 1;
	for (int i = 0; i < out.ndim; i++)
		*count *= (size_t)out.dims[i];
	float *y = malloc(*count * sizeof *y);
	memcpy(y, out.data, *count * sizeof *y);
	free(x);
	return y;
}

static int cmd_shapes(const char *mlp, const char *sym)
{
	char b[128];
	int64_t d[2] = {7, 7};
	dlrun_model *m = open_or_die(mlp, NULL);
	/* fixed sizes: known at once, and the same after a run */
	if (strcmp(out_shape(m, 0, b, sizeof b), "[4]") != 0)
		FAIL("mlp's output shape before a run: %s, expected [4]", b);
	if (dlrun_output_shape(m, 1, d, 2) != DLRUN_EINPUT ||
	    dlrun_output_shape(m, -1, d, 2) != DLRUN_EINPUT ||
	    dlrun_output_shape(NULL, 0, d, 2) != DLRUN_EINPUT)
		FAIL("dlrun_output_shape of no such output is not DLRUN_EINPUT");
	if (dlrun_output_shape(m, 0, d, 0) != 1 || d[0] != 7)
		FAIL("dlrun_output_shape with max 0 wrote a size or lost the rank");
	/* 0 threads: all processors, the same numbers as one thread */
	struct dlrun_error e;
	if (dlrun_set_threads(m, 1, &e) != 0)
		FAIL("dlrun_set_threads(m, 1): %s", e.message);
	size_t n1, n0;
	float *y1 = run_ramp(m, 5, &n1);
	if (dlrun_set_threads(m, 0, &e) != 0 || e.code != 0)
		FAIL("dlrun_set_threads(m, 0): %s", e.message);
	float *y0 = run_ramp(m, 5, &n0);
	if (n0 != n1 || memcmp(y0, y1, n0 * sizeof *y0) != 0)
		FAIL("all processors give other numbers than one thread");
	if (dlrun_set_threads(NULL, 0, &e) != DLRUN_EINPUT)
		FAIL("dlrun_set_threads(NULL, 0) is not an error");
	if (strcmp(out_shape(m, 0, b, sizeof b), "[4]") != 0)
		FAIL("mlp's output shape after a run: %s, expected [4]", b);
	printf("%s: output [4] before and after a run; 0 threads as 1\n", mlp);
	free(y0);
	free(y1);
	dlrun_close(m);
	/* a symbolic size: -1 until a batch ran, then the batch's */
	m = open_or_die(sym, NULL);
	d[0] = 7;
	if (dlrun_output_shape(m, 0, d, 2) != -1 || d[0] != 7)
		FAIL("symbolic output shape before a run: not -1 with nothing written");
	int64_t per[DLRUN_MAX_DIMS];
	if (dlrun_input_shape(m, 0, per, DLRUN_MAX_DIMS) != 2 || per[0] != -1 || per[1] != 4)
		FAIL("symbolic input shape is not [-1, 4]");
	float x[2 * 5 * 4];
	for (int i = 0; i < 40; i++)
		x[i] = (float)i / 40.0f;
	struct dlrun_tensor in = {.data = x, .ndim = 3, .dims = {2, 5, 4}}, out = {0};
	if (dlrun_run(m, &in, 1, &out, 1, &e) != 0)
		FAIL("run: %s", e.message);
	if (strcmp(out_shape(m, 0, b, sizeof b), "[5, 3]") != 0)
		FAIL("symbolic output shape after a run with T = 5: %s, expected [5, 3]", b);
	printf("%s: output not known before a run, [5, 3] after T = 5\n", sym);
	dlrun_close(m);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "run") == 0)
		return cmd_run(argv[2], argv[3]);
	if (argc == 4 && strcmp(argv[1], "threads") == 0)
		return cmd_threads(argv[2], argv[3]);
	if (argc == 3 && strcmp(argv[1], "errors") == 0)
		return cmd_errors(argv[2]);
	if (argc == 4 && strcmp(argv[1], "train") == 0)
		return cmd_train(argv[2], argv[3]);
	if (argc == 4 && strcmp(argv[1], "shapes") == 0)
		return cmd_shapes(argv[2], argv[3]);
	if (argc == 4 && strcmp(argv[1], "batch") == 0)
		return cmd_batch(argv[2], argv[3]);
	if (argc == 5 && strcmp(argv[1], "resave") == 0)
		return cmd_resave(argv[2], argv[3], argv[4]);
	if (argc == 4 && strcmp(argv[1], "runsave") == 0)
		return cmd_runsave(argv[2], argv[3]);
	fprintf(stderr, "usage: api_test run|threads|errors|train|shapes|batch|resave|runsave ...\n");
	return 2;
}
