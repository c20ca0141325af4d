/* Training data: one array per model input and the labels, from .npy
 * files, .npz members named as the model's inputs, or a stream of .npy
 * arrays; held as float32 samples and int64 class ids (or float targets). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/mman.h>

#include "io/npy.h"
#include "io/npz.h"
#include "train/data.h"
#include "train/text.h"

static void array_free(struct dl_array *a)
{
	if (a->map)
		munmap(a->map, a->map_len);
	else {
		free(a->f);
		free(a->ids);
	}
	memset(a, 0, sizeof *a);
}

void dl_dataset_free(struct dl_dataset *d)
{
	if (!d)
		return;
	if (d->src && d->src->free)
		d->src->free(d->src->user);
	free(d->src);
	for (int i = 0; d->x && i < d->n_x; i++)
		array_free(&d->x[i]);
	free(d->x);
	array_free(&d->y);
	dl_text_free(d->text);
	memset(d, 0, sizeof *d);
}

int64_t dl_array_sample_numel(const struct dl_array *a)
{
	return a->shape.ndim ? dl_shape_prod(&a->shape, 1, a->shape.ndim) : 0;
}

static int dataset_init(struct dl_dataset *d, int n_x, struct dl_error *err)
{
	memset(d, 0, sizeof *d);
	d->x = calloc((size_t)n_x + 1, sizeof *d->x);
	if (!d->x)
		return dl_error_set(err, DL_ERUN, "out of memory");
	d->n_x = n_x;
	return 0;
}

/* A large plain .npy whose bytes are already what we compute with
 * (little-endian <f4 samples, <i8 class ids, C order) is mapped rather
 * than read: the page cache holds it once, and only touched pages load. */
#define MAP_MIN_BYTES (1 << 20)

static void *map_array(FILE *f, const struct dl_npy_header *h, int want_ids,
		       void **base, size_t *len)
{
	if (h->fortran || h->data_bytes < MAP_MIN_BYTES ||
	    h->dtype != (want_ids ? DL_I64 : DL_F32))
		return NULL;
	long off = ftell(f);
	if (off < 0 || off % 8)
		return NULL;
	size_t total = (size_t)off + h->data_bytes;
	void *m = mmap(NULL, total, PROT_READ, MAP_PRIVATE, fileno(f), 0);
	if (m == MAP_FAILED)
		return NULL;
	/* the file must really hold all the data */
	if (fseek(f, 0, SEEK_END) != 0 || ftell(f) < (long)total) {
		munmap(m, total);
		return NULL;
	}
	*base = m;
	*len = total;
	return (char *)m + off;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t l = strlen(s), k = strlen(suffix);
	return l >= k && strcmp(s + l - k, suffix) == 0;
}

/* What an array must hold. */
enum kind {
	K_FLOATS,  /* float samples or targets */
	K_TOKENS,  /* a dtype: int input: integers (or floats), read as floats */
	K_IDS,     /* class ids */
};

static int is_int_dtype(enum dl_dtype t)
{
	return t == DL_I32 || t == DL_I64 || t == DL_U8;
}

/* Reads the array whose header h was just read from f into a (mapped when
 * can_map and it fits). name is the array's place in messages. */
static int read_data(FILE *f, const struct dl_npy_header *h, const char *name,
		     enum kind k, int can_map, struct dl_array *a,
		     struct dl_error *err)
{
	if (h->shape.ndim == 0)
		return dl_error_set(err, DL_EINPUT, "%s: a scalar; training data has a sample dimension first", name);
	size_t count = h->numel > 0 ? (size_t)h->numel : 1;
	a->shape = h->shape;
	void *mapped = can_map && k != K_TOKENS ? map_array(f, h, k == K_IDS, &a->map, &a->map_len)
						: NULL;
	if (mapped) {
		if (k == K_IDS)
			a->ids = mapped;
		else
			a->f = mapped;
		return 0;
	}
	if (k == K_IDS) {
		if (!is_int_dtype(h->dtype))
			return dl_error_set(err, DL_EINPUT,
					    "%s: class ids must be integers (<i8 or <i4), got floats", name);
		a->ids = malloc(count * sizeof *a->ids);
		if (!a->ids)
			return dl_error_set(err, DL_ERUN, "out of memory");
		return dl_npy_read_i64(f, name, h, h->numel, a->ids, err);
	}
	if (k == K_FLOATS && is_int_dtype(h->dtype))
		return dl_error_set(err, DL_EINPUT, "%s: must hold floats (<f4 or <f8)", name);
	a->f = malloc(count * sizeof *a->f);
	if (!a->f)
		return dl_error_set(err, DL_ERUN, "out of memory");
	return dl_npy_read_f32(f, name, h, h->numel, a->f, err);
}

/* Reads one whole array from f (an .npy stream positioned at its start). */
static int read_array(FILE *f, const char *name, enum kind k, int can_map,
		      struct dl_array *a, struct dl_error *err)
{
	struct dl_npy_header h;
	int rc = dl_npy_read_header(f, name, &h, err);
	if (rc == 0)
		return dl_error_set(err, DL_EINPUT, "%s: empty: no array", name);
	if (rc < 0)
		return rc;
	return read_data(f, &h, name, k, can_map, a, err);
}

/* Reads an .npy file whole. */
static int read_npy_file(const char *path, enum kind k, struct dl_array *a,
			 struct dl_error *err)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return dl_error_set(err, DL_EINPUT, "%s: cannot open: %s", path, strerror(errno));
	int rc = read_array(f, path, k, 1, a, err);
	fclose(f);
	return rc;
}

static int read_member(struct dl_npz *z, const char *path, const char *member, enum kind k,
		       struct dl_array *a, struct dl_error *err)
{
	char name[1024];
	snprintf(name, sizeof name, "%s:%s", path, member);
	FILE *f = dl_npz_member(z, member, err);
	if (!f)
		return err->code ? err->code : DL_EINPUT;
	int rc = read_array(f, name, k, 0, a, err);
	fclose(f);
	return rc;
}

/* "[5, 5]", symbolic sizes by name. */
static char *spec_str(const struct dl_input_spec *in, char *buf, size_t size)
{
	size_t used = (size_t)snprintf(buf, size, "[");
	for (int i = 0; i < in->ndim && used < size; i++) {
		if (in->d[i] >= 0)
			used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "",
						 (long long)in->d[i]);
		else
			used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "",
						 in->sym[i] ? in->sym[i] : "?");
	}
	if (used < size)
		snprintf(buf + used, size - used, "]");
	return buf;
}

/* The per-sample shape of a (read from `name`) against the model's input. */
static int check_input(const struct dl_array *a, const struct dl_input_spec *in,
		       const char *name, struct dl_error *err)
{
	int ok = a->shape.ndim == in->ndim + 1;
	for (int i = 0; ok && i < in->ndim; i++)
		if (in->d[i] >= 0 && a->shape.d[i + 1] != in->d[i])
			ok = 0;
	if (ok)
		return 0;
	struct dl_shape per = a->shape;
	per.ndim = a->shape.ndim ? a->shape.ndim - 1 : 0;
	for (int i = 0; i < per.ndim; i++)
		per.d[i] = a->shape.d[i + 1];
	char got[160], want[160];
	return dl_error_set(err, DL_EINPUT,
			    "%s: per-sample shape %s, but the model's input '%s' takes %s "
			    "(the array is [N, ...] with N samples first)",
			    name, dl_shape_str(&per, got, sizeof got), in->name,
			    spec_str(in, want, sizeof want));
}

/* Every input array holds the data's samples, or one sample that serves
 * every sample (a graph's adjacency, as infer broadcasts a batch-1 input);
 * the labels hold the data's samples. */
static int check_counts(struct dl_dataset *d, const char *const *names,
			const char *yname, struct dl_error *err)
{
	int at = 0;   /* the first input that does not hold one sample */
	while (at + 1 < d->n_x && d->x[at].shape.d[0] == 1)
		at++;
	int64_t n = d->x[at].shape.d[0];
	for (int i = 0; i < d->n_x; i++)
		if (d->x[i].shape.d[0] != n && d->x[i].shape.d[0] != 1)
			return dl_error_set(err, DL_EINPUT,
					    "%s has %lld samples but %s has %lld; they must match "
					    "(or hold one sample, which serves every sample)",
					    names[i], (long long)d->x[i].shape.d[0], names[at],
					    (long long)n);
	if (d->y.shape.ndim && d->y.shape.d[0] != n)
		return dl_error_set(err, DL_EINPUT,
				    "%s has %lld samples but the data has %lld; they must match",
				    yname, (long long)d->y.shape.d[0], (long long)n);
	d->n = n;
	return 0;
}

static enum kind input_kind(const struct dl_data_spec *s, int i)
{
	return s->inputs[i].is_int ? K_TOKENS : K_FLOATS;
}

/* Labels from a separate file: an .npy, or the `y` of an .npz. */
static int read_labels_file(const char *path, const struct dl_data_spec *s,
			    struct dl_array *y, struct dl_error *err)
{
	enum kind k = s->ids ? K_IDS : K_FLOATS;
	if (!ends_with(path, ".npz"))
		return read_npy_file(path, k, y, err);
	struct dl_npz z;
	memset(&z, 0, sizeof z);
	int rc = dl_npz_open(&z, path, err);
	if (rc == 0)
		rc = read_member(&z, path, "y", k, y, err);
	dl_npz_close(&z);
	return rc;
}

int dl_dataset_load_npy(struct dl_dataset *d, const char *xpath, const char *labels_path,
			const struct dl_data_spec *s, struct dl_error *err)
{
	int rc = dataset_init(d, 1, err);
	if (rc == 0)
		rc = read_npy_file(xpath, input_kind(s, 0), &d->x[0], err);
	if (rc == 0)
		rc = check_input(&d->x[0], &s->inputs[0], xpath, err);
	if (rc == 0)
		rc = read_labels_file(labels_path, s, &d->y, err);
	if (rc == 0) {
		const char *names[1] = {xpath};
		rc = check_counts(d, names, labels_path, err);
	}
	if (rc)
		dl_dataset_free(d);
	return rc;
}

/* The archive's member names, "a, b, c" (for messages). */
static void member_list(const struct dl_npz *z, char *buf, size_t size)
{
	size_t used = 0;
	buf[0] = '\0';
	for (int i = 0; i < z->n && used < size; i++)
		used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "",
					 z->m[i].name);
}

static int has_member(const struct dl_npz *z, const char *name)
{
	for (int i = 0; i < z->n; i++)
		if (strcmp(z->m[i].name, name) == 0)
			return 1;
	return 0;
}

/* The member that holds input i (train or val set) into buf: the input's
 * name (+ "_val"), or `x` (`x_val`) for a model with one input. Returns 0,
 * or -1 when none is there. */
static int member_for(const struct dl_npz *z, const struct dl_data_spec *s, int i, int val,
		      char *buf, size_t size)
{
	snprintf(buf, size, "%s%s", s->inputs[i].name, val ? "_val" : "");
	if (has_member(z, buf))
		return 0;
	if (s->n_inputs == 1) {
		snprintf(buf, size, "%s", val ? "x_val" : "x");
		if (has_member(z, buf))
			return 0;
	}
	snprintf(buf, size, "%s%s", s->inputs[i].name, val ? "_val" : "");
	return -1;
}

/* Is `name` an array a training .npz may hold: an input's (or x), y, or
 * their _val forms? */
static int known_member(const struct dl_data_spec *s, const char *name)
{
	size_t l = strlen(name);
	char base[512];
	snprintf(base, sizeof base, "%s", name);
	if (l > 4 && strcmp(name + l - 4, "_val") == 0)
		base[l - 4] = '\0';
	if (strcmp(base, "y") == 0 || (s->n_inputs == 1 && strcmp(base, "x") == 0))
		return 1;
	for (int i = 0; i < s->n_inputs; i++)
		if (strcmp(base, s->inputs[i].name) == 0)
			return 1;
	return 0;
}

/* "x [5, 3], adj [5, 5]" with suffix after each name. */
static void expected_list(const struct dl_data_spec *s, const char *suffix, char *buf,
			  size_t size)
{
	size_t used = 0;
	buf[0] = '\0';
	for (int i = 0; i < s->n_inputs && used < size; i++) {
		char sh[160];
		used += (size_t)snprintf(buf + used, size - used, "%s%s%s %s", i ? ", " : "",
					 s->inputs[i].name, suffix, spec_str(&s->inputs[i], sh, sizeof sh));
	}
}

int dl_dataset_load_npz(struct dl_dataset *d, const char *path, int val,
			const char *labels_path, const struct dl_data_spec *s,
			struct dl_error *err)
{
	struct dl_npz z;
	memset(&z, 0, sizeof z);
	int rc = dataset_init(d, s->n_inputs, err);
	if (rc == 0)
		rc = dl_npz_open(&z, path, err);
	/* an array the model does not take is an error: most likely a
	 * misnamed input */
	for (int m = 0; rc == 0 && m < z.n; m++)
		if (!known_member(s, z.m[m].name)) {
			char want[600];
			expected_list(s, "", want, sizeof want);
			rc = dl_error_set(err, DL_EINPUT,
					  "%s: array '%s' is not one the model takes: one array per "
					  "input named as the input (%s), the labels y, and for "
					  "validation the same names with _val",
					  path, z.m[m].name, want);
		}
	/* validation arrays are optional: none at all is an empty set */
	int any_val = 0;
	for (int m = 0; rc == 0 && m < z.n; m++) {
		size_t l = strlen(z.m[m].name);
		any_val |= l > 4 && strcmp(z.m[m].name + l - 4, "_val") == 0;
	}
	if (rc == 0 && val && !any_val) {
		dl_npz_close(&z);
		return 0;
	}
	char **names = calloc((size_t)s->n_inputs + 1, sizeof *names);
	if (rc == 0 && !names)
		rc = dl_error_set(err, DL_ERUN, "out of memory");
	for (int i = 0; rc == 0 && i < s->n_inputs; i++) {
		char member[512], held[600], want[600];
		int shared = 0;   /* the training array of one sample serves both sets */
		if (val && member_for(&z, s, i, val, member, sizeof member) != 0 &&
		    member_for(&z, s, i, 0, member, sizeof member) == 0) {
			if (read_member(&z, path, member, input_kind(s, i), &d->x[i], err) != 0) {
				rc = err->code;
				break;
			}
			shared = d->x[i].shape.ndim > 0 && d->x[i].shape.d[0] == 1;
			array_free(&d->x[i]);
			if (!shared)
				member_for(&z, s, i, val, member, sizeof member);
		}
		if (!shared && member_for(&z, s, i, val, member, sizeof member) != 0) {
			member_list(&z, held, sizeof held);
			expected_list(s, val ? "_val" : "", want, sizeof want);
			rc = dl_error_set(err, DL_EINPUT,
					  "%s: no array '%s' for the model's input '%s'; the model "
					  "takes %s%s (per sample, N samples first), the archive holds %s",
					  path, member, s->inputs[i].name, want,
					  labels_path ? "" : val ? " and y_val" : " and y",
					  z.n ? held : "nothing");
			break;
		}
		char name[1100];
		snprintf(name, sizeof name, "%s:%s", path, member);
		if (!(names[i] = strdup(name))) {
			rc = dl_error_set(err, DL_ERUN, "out of memory");
			break;
		}
		rc = read_member(&z, path, member, input_kind(s, i), &d->x[i], err);
		if (rc == 0)
			rc = check_input(&d->x[i], &s->inputs[i], name, err);
	}
	char yname[1100];
	if (rc == 0 && labels_path) {
		snprintf(yname, sizeof yname, "%s", labels_path);
		rc = read_labels_file(labels_path, s, &d->y, err);
	} else if (rc == 0) {
		const char *ym = val ? "y_val" : "y";
		snprintf(yname, sizeof yname, "%s:%s", path, ym);
		if (!has_member(&z, ym)) {
			char held[600];
			member_list(&z, held, sizeof held);
			rc = dl_error_set(err, DL_EINPUT, "%s: no array '%s' (the labels); the archive "
					  "holds %s", path, ym, held);
		} else {
			rc = read_member(&z, path, ym, s->ids ? K_IDS : K_FLOATS, &d->y, err);
		}
	}
	if (rc == 0)
		rc = check_counts(d, (const char *const *)names, yname, err);
	for (int i = 0; names && i < s->n_inputs; i++)
		free(names[i]);
	free(names);
	dl_npz_close(&z);
	if (rc)
		dl_dataset_free(d);
	return rc;
}

/* Copies samples [from, from + n) of a into b. */
static int array_slice(struct dl_array *b, const struct dl_array *a, int64_t from, int64_t n,
		       struct dl_error *err)
{
	int64_t s = dl_array_sample_numel(a);
	b->shape = a->shape;
	b->shape.d[0] = n;
	if (a->ids) {
		b->ids = malloc((size_t)(n * s) * sizeof *b->ids + 1);
		if (!b->ids)
			return dl_error_set(err, DL_ERUN, "out of memory");
		memcpy(b->ids, a->ids + from * s, (size_t)(n * s) * sizeof *b->ids);
	} else {
		b->f = malloc((size_t)(n * s) * sizeof *b->f + 1);
		if (!b->f)
			return dl_error_set(err, DL_ERUN, "out of memory");
		memcpy(b->f, a->f + from * s, (size_t)(n * s) * sizeof *b->f);
	}
	return 0;
}

int dl_dataset_split(struct dl_dataset *train, struct dl_dataset *val,
		     double fraction, struct dl_error *err)
{
	memset(val, 0, sizeof *val);
	int64_t nv = (int64_t)(fraction * (double)train->n + 0.5);
	if (fraction <= 0 || fraction >= 1 || nv < 1 || nv >= train->n)
		return dl_error_set(err, DL_EINPUT,
				    "--val-split %g leaves no training or no validation samples "
				    "of %lld", fraction, (long long)train->n);
	int64_t nt = train->n - nv;
	int rc = dataset_init(val, train->n_x, err);
	/* an input of one sample that serves every sample serves both sets */
	for (int i = 0; rc == 0 && i < train->n_x; i++)
		rc = dl_array_broadcast(&train->x[i], train->n)
			     ? array_slice(&val->x[i], &train->x[i], 0, 1, err)
			     : array_slice(&val->x[i], &train->x[i], nt, nv, err);
	if (rc == 0)
		rc = array_slice(&val->y, &train->y, nt, nv, err);
	if (rc)
		return rc;
	val->n = nv;
	train->n = nt;
	for (int i = 0; i < train->n_x; i++)
		if (train->x[i].shape.d[0] != 1 || nt + nv == 1)
			train->x[i].shape.d[0] = nt;
	train->y.shape.d[0] = nt;
	return 0;
}

/* Appends the samples of b to a (same per-sample shape, checked). */
static int array_append(struct dl_array *a, const struct dl_array *b, struct dl_error *err)
{
	int64_t s = dl_array_sample_numel(b);
	int64_t n = a->shape.ndim ? a->shape.d[0] : 0, m = b->shape.d[0];
	if (b->ids) {
		int64_t *p = realloc(a->ids, (size_t)((n + m) * s + 1) * sizeof *p);
		if (!p)
			return dl_error_set(err, DL_ERUN, "out of memory");
		a->ids = p;
		memcpy(a->ids + n * s, b->ids, (size_t)(m * s) * sizeof *p);
	} else {
		float *p = realloc(a->f, (size_t)((n + m) * s + 1) * sizeof *p);
		if (!p)
			return dl_error_set(err, DL_ERUN, "out of memory");
		a->f = p;
		memcpy(a->f + n * s, b->f, (size_t)(m * s) * sizeof *p);
	}
	a->shape = b->shape;
	a->shape.d[0] = n + m;
	return 0;
}

static int same_sample_shape(const struct dl_array *a, const struct dl_array *b)
{
	if (a->shape.ndim != b->shape.ndim)
		return 0;
	for (int i = 1; i < a->shape.ndim; i++)
		if (a->shape.d[i] != b->shape.d[i])
			return 0;
	return 1;
}

int dl_dataset_load_stream(struct dl_dataset *d, FILE *f, const struct dl_data_spec *s,
			   struct dl_error *err)
{
	int rc = dataset_init(d, s->n_inputs, err);
	if (rc)
		return rc;
	struct dl_array *one = calloc((size_t)s->n_inputs + 1, sizeof *one);
	if (!one) {
		dl_dataset_free(d);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	/* one array per input in the model's order, then the labels */
	int k = s->n_inputs + 1;
	for (;;) {
		long long step = (long long)d->steps + 1;
		for (int i = 0; rc == 0 && i < k; i++) {
			int lab = i == s->n_inputs;
			struct dl_array *a = lab ? &one[s->n_inputs] : &one[i];
			char name[600];
			if (lab)
				snprintf(name, sizeof name, "stdin (labels of step %lld)", step);
			else
				snprintf(name, sizeof name, "stdin (input '%s' of step %lld)",
					 s->inputs[i].name, step);
			struct dl_npy_header h;
			int more = dl_npy_read_header(f, name, &h, err);
			if (more < 0) {
				rc = more;
			} else if (more == 0 && i == 0) {
				rc = 1;   /* a clean end between steps */
			} else if (more == 0) {
				rc = dl_error_set(err, DL_EINPUT,
						  "stdin: the stream ended in step %lld after %d of its %d "
						  "arrays, before %s%s%s (per step: one array per input in "
						  "the model's order, then the labels)",
						  step, i, k, lab ? "the labels" : "input '",
						  lab ? "" : s->inputs[i].name, lab ? "" : "'");
			} else if (!lab && h.shape.ndim && is_int_dtype(h.dtype) && !s->inputs[i].is_int) {
				rc = dl_error_set(err, DL_EINPUT, "%s: must be an array of floats with a "
						  "sample dimension", name);
			} else if (lab && h.shape.ndim && s->ids != is_int_dtype(h.dtype)) {
				rc = dl_error_set(err, DL_EINPUT, "%s: must hold %s", name,
						  s->ids ? "integer class ids" : "float targets");
			} else {
				rc = read_data(f, &h, name, lab ? (s->ids ? K_IDS : K_FLOATS)
							       : input_kind(s, i),
					       0, a, err);
				if (rc == 0 && !lab)
					rc = check_input(a, &s->inputs[i], name, err);
				if (rc == 0 && i > 0 && a->shape.d[0] != one[0].shape.d[0])
					rc = dl_error_set(err, DL_EINPUT,
							  "%s: %lld samples, but input '%s' of the step has "
							  "%lld; they must match", name,
							  (long long)a->shape.d[0], s->inputs[0].name,
							  (long long)one[0].shape.d[0]);
			}
		}
		if (rc == 1) {
			rc = 0;
			break;
		}
		for (int i = 0; rc == 0 && d->steps > 0 && i < k; i++) {
			struct dl_array *have = i == s->n_inputs ? &d->y : &d->x[i];
			if (!same_sample_shape(have, &one[i]))
				rc = dl_error_set(err, DL_EINPUT,
						  "stdin: step %lld has other per-sample shapes than the first",
						  step);
		}
		for (int i = 0; rc == 0 && i < k; i++)
			rc = array_append(i == s->n_inputs ? &d->y : &d->x[i], &one[i], err);
		for (int i = 0; i < k; i++)
			array_free(&one[i]);
		if (rc)
			break;
		d->n = d->x[0].shape.d[0];
		d->steps++;
	}
	for (int i = 0; i < k; i++)
		array_free(&one[i]);
	free(one);
	if (rc == 0 && d->n == 0)
		rc = dl_error_set(err, DL_EINPUT, "stdin: no data (per step: one array per input "
				  "in the model's order, then the labels)");
	if (rc)
		dl_dataset_free(d);
	return rc;
}
