/* dlrun infer MODEL a.jpg b.png DIR/: image files through the model's
 * `data: image:` pipeline; with --top K the K largest softmax
 * probabilities of the first output per file, as PATH<TAB>CLASS<TAB>PROB
 * lines or (--json) one JSON object per file. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/stat.h>

#include "model/data_spec.h"
#include "train/image_data.h"
#include "verbs/infer_files.h"

void infer_files_close(struct infer_files *F)
{
	if (!F)
		return;
	dl_image_paths_free(F->paths, F->n);
	dl_data_classes_free(F->classes, F->n_classes);
	memset(F, 0, sizeof *F);
}

int infer_files_open(struct infer_files *F, const struct dl_graph *g, char **operands,
		     int n, int top, int json, struct dl_error *err)
{
	memset(F, 0, sizeof *F);
	F->top = top;
	F->json = json;
	int rc = dl_image_input(g, 0, &F->pipe, &F->c, &F->h, &F->w, err);
	if (rc == 0 && (top || json))
		rc = dl_data_classes(g->data, &F->classes, &F->n_classes, err);
	int64_t cap = 0;
	for (int i = 0; rc == 0 && i < n; i++) {
		struct stat sb;
		char **more = NULL;
		int64_t m = 1;
		if (stat(operands[i], &sb) == 0 && S_ISDIR(sb.st_mode)) {
			if ((rc = dl_image_list_dir(operands[i], &more, &m, err)) != 0)
				break;
			if (m == 0) {
				dl_image_paths_free(more, m);
				rc = dl_error_set(err, DL_EINPUT, "%s: a folder with no images (.png, "
						  ".jpg or .jpeg files)", operands[i]);
				break;
			}
		}
		if (F->n + m > cap) {
			cap = (F->n + m) * 2;
			char **v = realloc(F->paths, (size_t)cap * sizeof *v);
			if (!v) {
				dl_image_paths_free(more, m);
				rc = dl_error_set(err, DL_ERUN, "out of memory");
				break;
			}
			F->paths = v;
		}
		for (int64_t k = 0; k < m; k++) {
			F->paths[F->n] = more ? more[k] : strdup(operands[i]);
			if (!F->paths[F->n]) {
				rc = dl_error_set(err, DL_ERUN, "out of memory");
				break;
			}
			F->n++;
		}
		free(more);
	}
	if (rc)
		infer_files_close(F);
	return rc;
}

int infer_files_next(struct infer_files *F, float *buf, const char **path,
		     struct dl_error *err)
{
	if (F->next >= F->n)
		return 0;
	/* random steps in an evaluation pipeline draw from (seed 0, the
	 * file's place): the same output on every run */
	struct dl_rng r;
	dl_image_rng(&r, 0, 0, F->next);
	*path = F->paths[F->next++];
	/* an array file given as an image operand: say what reads it */
	FILE *f = fopen(*path, "rb");
	if (f) {
		unsigned char head[6] = {0};
		size_t got = fread(head, 1, sizeof head, f);
		fclose(f);
		if (got == 6 && memcmp(head, "\x93NUMPY", 6) == 0)
			return dl_error_set(err, DL_EINPUT, "%s: a .npy array, not an image; "
					    "'dlrun infer MODEL -i %s' (or on stdin) reads arrays",
					    *path, *path);
	}
	int rc = dl_image_sample(F->pipe, F->c, F->h, F->w, *path, &r, buf, err);
	return rc ? rc : 1;
}

struct ranked {
	double p;
	int64_t i;
};

static int by_prob(const void *a, const void *b)
{
	const struct ranked *x = a, *y = b;
	if (x->p != y->p)
		return x->p > y->p ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

int infer_files_print(const struct infer_files *F, FILE *f, const char *path,
		      const float *out, int64_t n, struct dl_error *err)
{
	double *p = malloc((size_t)n * sizeof *p + 1);
	int64_t *order = malloc((size_t)n * sizeof *order + 1);
	if (!p || !order) {
		free(p);
		free(order);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	double mx = -INFINITY, sum = 0;
	for (int64_t i = 0; i < n; i++)
		mx = out[i] > mx ? out[i] : mx;
	for (int64_t i = 0; i < n; i++)
		sum += p[i] = exp((double)out[i] - mx);
	for (int64_t i = 0; i < n; i++)
		p[i] /= sum;
	int64_t k = F->top > 0 ? F->top : 5;
	if (k > n)
		k = n;
	/* the k largest, ties to the lower index (as torch.topk on CPU) */
	struct ranked *r = malloc((size_t)n * sizeof *r + 1);
	if (!r) {
		free(p);
		free(order);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	for (int64_t i = 0; i < n; i++)
		r[i] = (struct ranked){isnan(p[i]) ? -1 : p[i], i};
	qsort(r, (size_t)n, sizeof *r, by_prob);
	for (int64_t j = 0; j < k; j++)
		order[j] = r[j].i;
	free(r);
	char id[32];
	int rc = 0;
	if (F->json) {
		json_t *o = json_object(), *top = json_array();
		json_object_set_new(o, "file", json_string(path));
		for (int64_t j = 0; j < k; j++) {
			json_t *e = json_object();
			snprintf(id, sizeof id, "%lld", (long long)order[j]);
			json_object_set_new(e, "class", json_string(order[j] < F->n_classes
								     ? F->classes[order[j]] : id));
			json_object_set_new(e, "id", json_integer(order[j]));
			json_object_set_new(e, "prob", json_real(p[order[j]]));
			json_array_append_new(top, e);
		}
		json_object_set_new(o, "top", top);
		char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9) | JSON_ENSURE_ASCII);
		json_decref(o);
		if (!s || fprintf(f, "%s\n", s) < 0)
			rc = dl_error_set(err, DL_ERUN, "write failed");
		free(s);
	} else {
		for (int64_t j = 0; j < k && rc == 0; j++) {
			snprintf(id, sizeof id, "%lld", (long long)order[j]);
			if (fprintf(f, "%s\t%s\t%.6f\n", path,
				    order[j] < F->n_classes ? F->classes[order[j]] : id,
				    p[order[j]]) < 0)
				rc = dl_error_set(err, DL_ERUN, "write failed");
		}
	}
	free(p);
	free(order);
	return rc;
}
