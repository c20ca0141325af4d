/* Samples a character language model through libdlrun's step function:
 * feeds the prompt's ids, then draws each next id from the softmax of the
 * last position's logits at a temperature, feeding it back, so each step
 * costs one position's work (the model keeps its attention caches). It
 * stops at the model's context (its learned positions).
 *
 *     cc sample.c $(pkg-config --cflags --libs dlrun) -lm -o sample
 *     ./sample MODEL.yaml "3 1 4" 50        # prints 50 new ids */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <dlrun.h>

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s MODEL.yaml \"PROMPT IDS\" N\n", argv[0]);
		return 2;
	}
	struct dlrun_error err;
	dlrun_model *m;
	if (dlrun_open(&m, argv[1], NULL, &err) < 0) {
		fprintf(stderr, "sample: %s\n", err.message);
		return 2;
	}
	int64_t prompt[256];
	int n = 0;
	for (char *p = argv[2], *end; n < 256; p = end) {
		long long v = strtoll(p, &end, 10);
		if (end == p)
			break;
		prompt[n++] = v;
	}
	int steps = atoi(argv[3]);
	float logits[4096];
	double temperature = 0.8;
	srand(1);
	if (n < 1 || dlrun_step_begin(m, 1, 0, &err) < 0 ||
	    dlrun_step(m, 0, prompt, n, NULL, 0, logits, 4096, &err) < 0) {
		fprintf(stderr, "sample: %s\n", n < 1 ? "no prompt ids" : err.message);
		dlrun_close(m);
		return 2;
	}
	int64_t V;
	{
		int64_t dims[DLRUN_MAX_DIMS];
		dlrun_output_shape(m, 0, dims, DLRUN_MAX_DIMS);
		V = dims[1];
	}
	for (int s = 0; s < steps; s++) {
		/* softmax(logits / temperature), then one draw */
		double mx = -INFINITY, sum = 0.0, p[4096];
		for (int64_t j = 0; j < V; j++)
			mx = logits[j] > mx ? logits[j] : mx;
		for (int64_t j = 0; j < V; j++)
			sum += p[j] = exp((logits[j] - mx) / temperature);
		double u = (double)rand() / ((double)RAND_MAX + 1.0) * sum;
		int64_t id = 0;
		while (id < V - 1 && (u -= p[id]) > 0)
			id++;
		printf("%s%lld", s ? " " : "", (long long)id);
		if (s + 1 < steps && dlrun_step(m, 0, &id, 1, NULL, 0, logits, 4096, &err) < 0) {
			fprintf(stderr, "\nsample: %s\n", err.message);
			dlrun_close(m);
			return 1;
		}
	}
	printf("\n");
	dlrun_step_end(m);
	dlrun_close(m);
	return 0;
}
