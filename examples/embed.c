/* Runs the quick-start MLP (models/mlp.yaml) through libdlrun: opens the
 * model with its weights, reads three samples of 16 values from a text
 * file, prints the three rows of four outputs, then takes one training
 * step and prints its loss.
 *
 *     cc embed.c $(pkg-config --cflags --libs dlrun) -o embed
 *     ./embed models/mlp.yaml models/mlp-input.txt */
#include <stdio.h>
#include <stdlib.h>

#include <dlrun.h>

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s MODEL.yaml INPUT.txt\n", argv[0]);
		return 2;
	}
	struct dlrun_error err;
	dlrun_model *m;
	if (dlrun_open(&m, argv[1], NULL, &err) < 0) {
		fprintf(stderr, "embed: %s\n", err.message);
		return 2;
	}
	int64_t per[DLRUN_MAX_DIMS];
	int rank = dlrun_input_shape(m, 0, per, DLRUN_MAX_DIMS);
	if (dlrun_n_inputs(m) != 1 || rank != 1 || per[0] < 1) {
		fprintf(stderr, "embed: this example takes a model with one input [D]\n");
		dlrun_close(m);
		return 2;
	}
	int64_t D = per[0], n = 0, cap = 0;
	float *x = NULL, v;
	FILE *f = fopen(argv[2], "r");
	if (!f) {
		perror(argv[2]);
		dlrun_close(m);
		return 2;
	}
	for (;;) {
		int c = fgetc(f);
		if (c == '#') {         /* a comment line */
			while (c != '\n' && c != EOF)
				c = fgetc(f);
			continue;
		}
		if (c == EOF)
			break;
		ungetc(c, f);
		if (fscanf(f, "%f", &v) != 1) {
			fgetc(f);
			continue;
		}
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			float *t = realloc(x, (size_t)cap * sizeof *t);
			if (!t)
				return 1;
			x = t;
		}
		x[n++] = v;
	}
	fclose(f);
	struct dlrun_tensor in = {.data = x, .ndim = 2, .dims = {n / D, D}};
	struct dlrun_tensor out = {0};   /* the library's buffer */
	if (dlrun_run(m, &in, 1, &out, 1, &err) < 0) {
		fprintf(stderr, "embed: %s\n", err.message);
		free(x);
		dlrun_close(m);
		return 2;
	}
	for (int64_t i = 0; i < out.dims[0]; i++)
		for (int64_t j = 0; j < out.dims[1]; j++)
			printf(j + 1 < out.dims[1] ? "%.9g " : "%.9g\n",
			       (double)out.data[i * out.dims[1] + j]);

	/* one SGD step towards class 0 for every sample */
	struct dlrun_train_options o = {.optimizer = "sgd", .lr = 0.1};
	float *y = calloc((size_t)in.dims[0], sizeof *y);
	struct dlrun_tensor labels = {.data = y, .ndim = 1, .dims = {in.dims[0]}};
	double loss;
	int rc = dlrun_train_begin(m, &o, &err);
	if (rc == 0)
		rc = dlrun_train_step(m, &in, 1, &labels, &loss, &err);
	if (rc < 0)
		fprintf(stderr, "embed: %s\n", err.message);
	else
		printf("loss %.6f\n", loss);
	free(y);
	free(x);
	dlrun_close(m);
	return rc < 0 ? 1 : 0;
}
