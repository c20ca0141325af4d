/* Checks dlrun_step against dlrun_run (tests/generate.sh): the logits of
 * every stepped position must equal the last row of a full forward over
 * the same tokens. Sequences of different lengths are stepped in turn
 * (rows of one decoding state), fed first a prompt of several tokens, then
 * one token at a time, some of them restarted midway (dlrun_step_reset).
 *
 *   step_test MODEL WEIGHTS VOCAB STEPS ROWS [MAXLEN]
 *
 * Other inputs than the token input get fixed values (ids i % 4 for int
 * inputs). Prints the worst difference relative to the largest logit and
 * exits 1 above 1e-5. Also: step_test --bad-ids MODEL WEIGHTS checks that
 * dlrun_run and dlrun_train_step refuse ids outside the embedding. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrun.h"

#define MAXIN 8

static dlrun_model *open_or_die(const char *path, const char *weights)
{
	struct dlrun_error e;
	dlrun_model *m;
	if (dlrun_open(&m, path, weights, &e) != 0) {
		fprintf(stderr, "step_test: %s\n", e.message);
		exit(2);
	}
	return m;
}

static int tok_input(dlrun_model *m)
{
	for (int i = 0; i < dlrun_n_inputs(m); i++) {
		int64_t d[DLRUN_MAX_DIMS];
		int r = dlrun_input_shape(m, i, d, DLRUN_MAX_DIMS);
		if (r == 1 && d[0] < 0)
			return i;
	}
	return -1;
}

/* the other inputs, batch 1: fixed sizes, symbolic ones 5 */
static void other_inputs(dlrun_model *m, int tok, struct dlrun_tensor *in, float **buf)
{
	for (int i = 0; i < dlrun_n_inputs(m); i++) {
		memset(&in[i], 0, sizeof in[i]);
		buf[i] = NULL;
		if (i == tok)
			continue;
		int64_t d[DLRUN_MAX_DIMS];
		int r = dlrun_input_shape(m, i, d, DLRUN_MAX_DIMS);
		in[i].ndim = r + 1;
		in[i].dims[0] = 1;
		int64_t n = 1;
		for (int k = 0; k < r; k++) {
			in[i].dims[k + 1] = d[k] < 0 ? 5 : d[k];
			n *= in[i].dims[k + 1];
		}
		buf[i] = malloc(sizeof(float) * (size_t)n);
		for (int64_t j = 0; j < n; j++)
			buf[i][j] = (float)((j * 7 + 3) % 4);
		const char *name = dlrun_input_name(m, i);
		/* float inputs: smooth values */
		if (strstr(name, "x") || strstr(name, "mem") || strstr(name, "tgt"))
			for (int64_t j = 0; j < n; j++)
				buf[i][j] = (float)sin(0.37 * (double)j + i);
		in[i].data = buf[i];
	}
}

static int bad_ids(const char *model, const char *weights)
{
	dlrun_model *m = open_or_die(model, weights);
	const float bad[] = {99.0f, -1.0f, 3.5f, NAN};
	int fails = 0;
	for (int k = 0; k < 4; k++) {
		float x[4] = {1, 2, 3, 0};
		x[2] = bad[k];
		struct dlrun_tensor in = {.data = x, .ndim = 2, .dims = {1, 4}}, out = {0};
		struct dlrun_error e;
		int rc = dlrun_run(m, &in, 1, &out, 1, &e);
		if (rc != DLRUN_EINPUT || !strstr(e.message, "out of range")) {
			printf("not ok: dlrun_run took id %g: rc %d '%s'\n", (double)bad[k], rc, e.message);
			fails++;
		} else {
			printf("ok: dlrun_run: %s\n", e.message);
		}
		struct dlrun_train_options o = {.lr = 0.01};
		if (dlrun_train_begin(m, &o, &e) != 0) {
			printf("not ok: dlrun_train_begin: %s\n", e.message);
			return 1;
		}
		float y[4] = {1, 2, 3, 0};
		struct dlrun_tensor lab = {.data = y, .ndim = 2, .dims = {1, 4}};
		rc = dlrun_train_step(m, &in, 1, &lab, NULL, &e);
		if (rc != DLRUN_EINPUT || !strstr(e.message, "out of range")) {
			printf("not ok: dlrun_train_step took id %g: rc %d '%s'\n", (double)bad[k], rc,
			       e.message);
			fails++;
		} else {
			printf("ok: dlrun_train_step: %s\n", e.message);
		}
	}
	dlrun_close(m);
	return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "--bad-ids") == 0)
		return bad_ids(argv[2], argv[3]);
	if (argc < 6) {
		fprintf(stderr, "usage: step_test MODEL WEIGHTS VOCAB STEPS ROWS [MAXLEN]\n");
		return 2;
	}
	const char *model = argv[1], *weights = argv[2];
	int V = atoi(argv[3]), steps = atoi(argv[4]), rows = atoi(argv[5]);
	int maxlen = argc > 6 ? atoi(argv[6]) : steps + 8;
	dlrun_model *full = open_or_die(model, weights);
	dlrun_model *st = open_or_die(model, weights);
	struct dlrun_error e;
	int tok = tok_input(st);
	if (tok < 0) {
		fprintf(stderr, "step_test: no token input\n");
		return 2;
	}
	int nin = dlrun_n_inputs(st);
	struct dlrun_tensor in[MAXIN], fin[MAXIN];
	float *buf[MAXIN];
	other_inputs(st, tok, in, buf);
	if (dlrun_step_begin(st, rows, maxlen, &e) != 0) {
		printf("step_begin: %s\n", e.message);
		return 1;
	}
	/* each row's tokens: row r's sequence of ids (r * 5 + 3 t) % V */
	int64_t *seq = malloc(sizeof(int64_t) * (size_t)rows * (size_t)(steps + 8));
	int *len = calloc((size_t)rows, sizeof *len);
	float *lg = malloc(sizeof(float) * (size_t)V);
	double worst = 0.0;
	int restarts = 0;
	for (int k = 0; k < steps; k++) {
		for (int r = 0; r < rows; r++) {
			int64_t *s = seq + (size_t)r * (steps + 8);
			int n = len[r] == 0 ? 1 + (r + 2) % 4 : 1;  /* prompts of 1 to 4 */
			if (len[r] + n > maxlen)
				continue;
			for (int t = 0; t < n; t++)
				s[len[r] + t] = (r * 5 + 3 * (len[r] + t) + (len[r] + t) * (len[r] + t)) % V;
			if (dlrun_step(st, r, s + len[r], n, nin > 1 ? in : NULL, nin > 1 ? nin : 0, lg,
				       (size_t)V, &e) != 0) {
				printf("step: %s\n", e.message);
				return 1;
			}
			len[r] += n;
			/* the same tokens through a full forward */
			float *x = malloc(sizeof(float) * (size_t)len[r]);
			for (int t = 0; t < len[r]; t++)
				x[t] = (float)s[t];
			for (int i = 0; i < nin; i++)
				fin[i] = in[i];
			fin[tok] = (struct dlrun_tensor){.data = x, .ndim = 2, .dims = {1, len[r]}};
			struct dlrun_tensor out[4] = {{0}};
			int no = dlrun_n_outputs(full);
			if (dlrun_run(full, fin, nin, out, no, &e) != 0) {
				printf("run: %s\n", e.message);
				return 1;
			}
			const float *last = out[0].data + (size_t)(len[r] - 1) * V;
			double big = 0.0, d = 0.0;
			for (int j = 0; j < V; j++) {
				if (fabs(last[j]) > big)
					big = fabs(last[j]);
				if (fabs(last[j] - lg[j]) > d)
					d = fabs(last[j] - lg[j]);
			}
			d /= big > 0 ? big : 1.0;
			if (d > worst)
				worst = d;
			free(x);
			/* restart row 1 once, midway */
			if (r == 1 && k == steps / 2 && !restarts) {
				dlrun_step_reset(st, 1, &e);
				len[1] = 0;
				restarts++;
			}
		}
	}
	printf("worst relative difference %.3g over %d rows\n", worst, rows);
	dlrun_step_end(st);
	dlrun_close(st);
	dlrun_close(full);
	for (int i = 0; i < nin; i++)
		free(buf[i]);
	free(seq);
	free(len);
	free(lg);
	return worst <= 1e-5 ? 0 : 1;
}
