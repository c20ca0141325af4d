/* npycmp ACTUAL EXPECTED [RTOL]: compares two streams of .npy arrays for the
 * tests. Per array, rel = max|a-b| / max(max|b|, 1e-30) must be <= RTOL
 * (default 1e-5); NaN or Inf must sit at the same places on both sides.
 * Exit 0 when all pass, 1 when any fails, 2 when an input is unreadable. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/npy.h"

struct arrays {
	int n;
	struct dl_tensor *t;
};

static void free_arrays(struct arrays *a)
{
	for (int i = 0; i < a->n; i++)
		free(a->t[i].data);
	free(a->t);
}

static int load(const char *path, struct arrays *a)
{
	struct dl_error err = { 0 };
	FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
	memset(a, 0, sizeof *a);
	if (!f) {
		fprintf(stderr, "npycmp: %s: cannot open: %s\n", path,
			strerror(errno));
		return -1;
	}
	for (;;) {
		struct dl_tensor t;
		int rc = dl_npy_read(f, path, &t, &err);
		if (rc < 0) {
			fprintf(stderr, "npycmp: %s\n", err.msg);
			break;
		}
		if (rc == 0)
			break;
		struct dl_tensor *more = realloc(a->t, (size_t)(a->n + 1) * sizeof *more);
		if (!more) {
			free(t.data);
			fprintf(stderr, "npycmp: out of memory\n");
			err.code = DL_ERUN;
			break;
		}
		a->t = more;
		a->t[a->n++] = t;
	}
	if (f != stdin)
		fclose(f);
	if (err.code) {
		free_arrays(a);
		return -1;
	}
	return 0;
}

/* Returns 1 when the array passes. */
static int compare(int i, const struct dl_tensor *a, const struct dl_tensor *b,
		   double rtol)
{
	char sa[256], sb[256];
	dl_shape_str(&a->shape, sa, sizeof sa);
	dl_shape_str(&b->shape, sb, sizeof sb);
	if (!dl_shape_equal(&a->shape, &b->shape)) {
		printf("array %d: shape %s, expected %s FAIL\n", i, sa, sb);
		return 0;
	}
	int64_t n = dl_shape_numel(&a->shape);
	double max_err = 0, max_b = 0;
	int64_t mismatch = -1;
	for (int64_t k = 0; k < n; k++) {
		double x = a->data[k], y = b->data[k];
		if (!isfinite(x) || !isfinite(y)) {
			/* same NaN places, or the same infinity, are equal */
			if (!(isnan(x) && isnan(y)) && x != y && mismatch < 0)
				mismatch = k;
			continue;
		}
		if (fabs(x - y) > max_err)
			max_err = fabs(x - y);
		if (fabs(y) > max_b)
			max_b = fabs(y);
	}
	double rel = max_err / (max_b > 1e-30 ? max_b : 1e-30);
	int ok = mismatch < 0 && rel <= rtol;
	printf("array %d: shape %s max_abs_err %.2g rel_err %.2g", i, sa,
	       max_err, rel);
	if (mismatch >= 0)
		printf(" element %lld is %g, expected %g", (long long)mismatch,
		       (double)a->data[mismatch], (double)b->data[mismatch]);
	printf(" %s\n", ok ? "ok" : "FAIL");
	return ok;
}

int main(int argc, char **argv)
{
	double rtol = 1e-5;
	if (argc == 4) {
		char *end;
		rtol = strtod(argv[3], &end);
		if (*end || end == argv[3] || !(rtol >= 0)) {
			fprintf(stderr, "npycmp: bad RTOL '%s'\n", argv[3]);
			return 2;
		}
	}
	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: npycmp ACTUAL EXPECTED [RTOL]\n");
		return 2;
	}
	struct arrays a, b;
	if (load(argv[1], &a))
		return 2;
	if (load(argv[2], &b)) {
		free_arrays(&a);
		return 2;
	}
	int ok = 1;
	if (a.n != b.n) {
		printf("%s has %d arrays, %s has %d FAIL\n", argv[1], a.n,
		       argv[2], b.n);
		ok = 0;
	}
	for (int i = 0; i < a.n && i < b.n; i++)
		ok &= compare(i, &a.t[i], &b.t[i], rtol);
	free_arrays(&a);
	free_arrays(&b);
	return ok ? 0 : 1;
}
