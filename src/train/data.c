/* Training data: x and y arrays from .npy files or .npz members, held as
 * float32 samples and int64 class ids (or float targets). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/mman.h>

#include "io/npy.h"
#include "io/npz.h"
#include "train/data.h"

void dl_dataset_free(struct dl_dataset *d)
{
	if (!d)
		return;
	if (d->map[0])
		munmap(d->map[0], d->map_len[0]);
	else
		free(d->x);
	if (d->map[1])
		munmap(d->map[1], d->map_len[1]);
	else {
		free(d->ids);
		free(d->targets);
	}
	memset(d, 0, sizeof *d);
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

/* Opens path, or member `member` of an .npz path, as an npy stream. */
static FILE *open_array(const char *path, const char *member, struct dl_npz *z,
			char *name, size_t size, struct dl_error *err)
{
	if (ends_with(path, ".npz")) {
		snprintf(name, size, "%s:%s", path, member);
		if (!z->f && dl_npz_open(z, path, err) != 0)
			return NULL;
		return dl_npz_member(z, member, err);
	}
	snprintf(name, size, "%s", path);
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	if (!f)
		dl_error_set(err, DL_EINPUT, "%s: cannot open: %s", path, strerror(errno));
	return f;
}

static int read_array(FILE *f, const char *name, int want_ids, struct dl_shape *shape,
		      float **fx, int64_t **ids, void **map, size_t *map_len,
		      struct dl_error *err)
{
	struct dl_npy_header h;
	int rc = dl_npy_read_header(f, name, &h, err);
	if (rc == 0)
		return dl_error_set(err, DL_EINPUT, "%s: empty: no array", name);
	if (rc < 0)
		return rc;
	if (h.shape.ndim == 0)
		return dl_error_set(err, DL_EINPUT, "%s: a scalar; training data has a sample dimension first", name);
	size_t count = h.numel > 0 ? (size_t)h.numel : 1;
	*shape = h.shape;
	void *mapped = map ? map_array(f, &h, want_ids, map, map_len) : NULL;
	if (mapped) {
		if (want_ids)
			*ids = mapped;
		else
			*fx = mapped;
		return 0;
	}
	if (want_ids) {
		if (h.dtype != DL_I32 && h.dtype != DL_I64 && h.dtype != DL_U8)
			return dl_error_set(err, DL_EINPUT,
					    "%s: class ids must be integers (<i8 or <i4), got floats", name);
		*ids = malloc(count * sizeof **ids);
		if (!*ids)
			return dl_error_set(err, DL_ERUN, "out of memory");
		return dl_npy_read_i64(f, name, &h, h.numel, *ids, err);
	}
	if (h.dtype != DL_F32 && h.dtype != DL_F64 && h.dtype != DL_F16)
		return dl_error_set(err, DL_EINPUT, "%s: must hold floats (<f4 or <f8)", name);
	*fx = malloc(count * sizeof **fx);
	if (!*fx)
		return dl_error_set(err, DL_ERUN, "out of memory");
	return dl_npy_read_f32(f, name, &h, h.numel, *fx, err);
}

int dl_dataset_load(struct dl_dataset *d, const char *xpath, const char *xmember,
		    const char *ypath, const char *ymember, int ids,
		    int x_is_int, struct dl_error *err)
{
	memset(d, 0, sizeof *d);
	struct dl_npz z;
	memset(&z, 0, sizeof z);
	char name[1024];
	int rc = 0;
	FILE *f = open_array(xpath, xmember, &z, name, sizeof name, err);
	if (!f)
		rc = err->code ? err->code : DL_EINPUT;
	if (rc == 0) {
		rc = read_array(f, name, 0, &d->xshape, &d->x, NULL,
				f != stdin && !ends_with(xpath, ".npz") ? &d->map[0] : NULL,
				&d->map_len[0], err);
		if (f != stdin)
			fclose(f);
		if (rc == DL_EINPUT && x_is_int && strstr(err->msg, "must hold floats")) {
			/* token ids: integers read as floats */
			dl_error_clear(err);
			free(d->x);
			d->x = NULL;
			f = open_array(xpath, xmember, &z, name, sizeof name, err);
			int64_t *tmp = NULL;
			rc = f ? read_array(f, name, 1, &d->xshape, NULL, &tmp, NULL, NULL, err) : DL_EINPUT;
			if (f && f != stdin)
				fclose(f);
			int64_t n = dl_shape_numel(&d->xshape);
			d->x = rc == 0 ? malloc((size_t)(n > 0 ? n : 1) * sizeof *d->x) : NULL;
			if (rc == 0 && !d->x)
				rc = dl_error_set(err, DL_ERUN, "out of memory");
			for (int64_t i = 0; rc == 0 && i < n; i++)
				d->x[i] = (float)tmp[i];
			free(tmp);
		}
	}
	if (rc == 0 && ypath) {
		if (!(ends_with(ypath, ".npz") && z.f && strcmp(ypath, xpath) == 0))
			dl_npz_close(&z);
		f = open_array(ypath, ymember, &z, name, sizeof name, err);
		if (!f)
			rc = err->code ? err->code : DL_EINPUT;
		else {
			rc = read_array(f, name, ids, &d->yshape, &d->targets, &d->ids,
					f != stdin && !ends_with(ypath, ".npz") ? &d->map[1] : NULL,
					&d->map_len[1], err);
			if (f != stdin)
				fclose(f);
		}
		if (rc == 0 && d->yshape.d[0] != d->xshape.d[0])
			rc = dl_error_set(err, DL_EINPUT,
					  "%s has %lld samples but the data has %lld; they must match",
					  name, (long long)d->yshape.d[0], (long long)d->xshape.d[0]);
	}
	dl_npz_close(&z);
	d->n = d->xshape.d[0];
	if (rc)
		dl_dataset_free(d);
	return rc;
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
	int64_t xs = dl_shape_prod(&train->xshape, 1, train->xshape.ndim);
	int64_t ys = train->yshape.ndim ? dl_shape_prod(&train->yshape, 1, train->yshape.ndim) : 0;
	val->xshape = train->xshape;
	val->yshape = train->yshape;
	val->xshape.d[0] = val->yshape.d[0] = nv;
	val->n = nv;
	val->x = malloc((size_t)(nv * xs) * sizeof *val->x + 1);
	if (!val->x)
		return dl_error_set(err, DL_ERUN, "out of memory");
	memcpy(val->x, train->x + nt * xs, (size_t)(nv * xs) * sizeof *val->x);
	if (train->ids) {
		val->ids = malloc((size_t)(nv * ys) * sizeof *val->ids + 1);
		if (!val->ids)
			return dl_error_set(err, DL_ERUN, "out of memory");
		memcpy(val->ids, train->ids + nt * ys, (size_t)(nv * ys) * sizeof *val->ids);
	}
	if (train->targets) {
		val->targets = malloc((size_t)(nv * ys) * sizeof *val->targets + 1);
		if (!val->targets)
			return dl_error_set(err, DL_ERUN, "out of memory");
		memcpy(val->targets, train->targets + nt * ys, (size_t)(nv * ys) * sizeof *val->targets);
	}
	train->n = nt;
	train->xshape.d[0] = train->yshape.d[0] = nt;
	return 0;
}

/* Appends the n samples of (x, ids or targets) to d, growing it. */
static int append(struct dl_dataset *d, const struct dl_shape *xs, float *x,
		  const struct dl_shape *ys, int64_t *ids, float *targets,
		  struct dl_error *err)
{
	int64_t xn = dl_shape_prod(xs, 1, xs->ndim), yn = dl_shape_prod(ys, 1, ys->ndim);
	int64_t n = xs->d[0];
	if (d->n == 0 && !d->x) {
		d->xshape = *xs;
		d->yshape = *ys;
	} else {
		struct dl_shape a = *xs, b = *ys;
		a.d[0] = d->xshape.d[0];
		b.d[0] = d->yshape.d[0];
		if (!dl_shape_equal(&a, &d->xshape) || !dl_shape_equal(&b, &d->yshape))
			return dl_error_set(err, DL_EINPUT,
					    "stdin: pair %lld has other per-sample shapes than the first",
					    (long long)d->pairs + 1);
	}
	float *nx = realloc(d->x, (size_t)((d->n + n) * xn + 1) * sizeof *nx);
	if (!nx)
		return dl_error_set(err, DL_ERUN, "out of memory");
	d->x = nx;
	memcpy(d->x + d->n * xn, x, (size_t)(n * xn) * sizeof *x);
	if (ids) {
		int64_t *ni = realloc(d->ids, (size_t)((d->n + n) * yn + 1) * sizeof *ni);
		if (!ni)
			return dl_error_set(err, DL_ERUN, "out of memory");
		d->ids = ni;
		memcpy(d->ids + d->n * yn, ids, (size_t)(n * yn) * sizeof *ids);
	} else {
		float *nt = realloc(d->targets, (size_t)((d->n + n) * yn + 1) * sizeof *nt);
		if (!nt)
			return dl_error_set(err, DL_ERUN, "out of memory");
		d->targets = nt;
		memcpy(d->targets + d->n * yn, targets, (size_t)(n * yn) * sizeof *targets);
	}
	d->n += n;
	d->xshape.d[0] = d->yshape.d[0] = d->n;
	d->pairs++;
	return 0;
}

int dl_dataset_load_stream(struct dl_dataset *d, FILE *f, int ids, int x_is_int,
			   struct dl_error *err)
{
	memset(d, 0, sizeof *d);
	int rc = 0;
	for (;;) {
		struct dl_npy_header h;
		int more = dl_npy_read_header(f, "stdin", &h, err);
		if (more <= 0) {
			rc = more;
			break;
		}
		struct dl_dataset one;
		memset(&one, 0, sizeof one);
		/* x: floats, or integer token ids for a dtype: int input */
		int x_ints = h.dtype == DL_I32 || h.dtype == DL_I64 || h.dtype == DL_U8;
		if (h.shape.ndim == 0 || (x_ints && !x_is_int)) {
			rc = dl_error_set(err, DL_EINPUT, "stdin: pair %lld: x must be an array of floats "
					  "with a sample dimension", (long long)d->pairs + 1);
			break;
		}
		one.xshape = h.shape;
		one.x = malloc((size_t)(h.numel + 1) * sizeof *one.x);
		if (!one.x) {
			rc = dl_error_set(err, DL_ERUN, "out of memory");
			break;
		}
		rc = dl_npy_read_f32(f, "stdin", &h, h.numel, one.x, err);
		if (rc == 0) {
			char name[64];
			snprintf(name, sizeof name, "stdin (labels of pair %lld)", (long long)d->pairs + 1);
			rc = dl_npy_read_header(f, name, &h, err);
			if (rc == 0)
				rc = dl_error_set(err, DL_EINPUT, "stdin: the stream ended after x of pair "
						  "%lld, before its labels", (long long)d->pairs + 1);
			else if (rc > 0) {
				rc = 0;
				one.yshape = h.shape;
				if (h.shape.ndim == 0 || h.shape.d[0] != one.xshape.d[0])
					rc = dl_error_set(err, DL_EINPUT,
							  "stdin: pair %lld: labels for %lld samples, x has %lld",
							  (long long)d->pairs + 1,
							  (long long)(h.shape.ndim ? h.shape.d[0] : 0),
							  (long long)one.xshape.d[0]);
				int y_ints = h.dtype == DL_I32 || h.dtype == DL_I64 || h.dtype == DL_U8;
				if (rc == 0 && ids != y_ints)
					rc = dl_error_set(err, DL_EINPUT, "%s: must hold %s", name,
							  ids ? "integer class ids" : "float targets");
				if (rc == 0 && ids) {
					one.ids = malloc((size_t)(h.numel + 1) * sizeof *one.ids);
					rc = one.ids ? dl_npy_read_i64(f, name, &h, h.numel, one.ids, err)
						     : dl_error_set(err, DL_ERUN, "out of memory");
				} else if (rc == 0) {
					one.targets = malloc((size_t)(h.numel + 1) * sizeof *one.targets);
					rc = one.targets ? dl_npy_read_f32(f, name, &h, h.numel, one.targets, err)
							 : dl_error_set(err, DL_ERUN, "out of memory");
				}
			}
		}
		if (rc == 0)
			rc = append(d, &one.xshape, one.x, &one.yshape, one.ids, one.targets, err);
		dl_dataset_free(&one);
		if (rc)
			break;
	}
	if (rc == 0 && d->n == 0)
		rc = dl_error_set(err, DL_EINPUT, "stdin: no (x, y) pairs");
	if (rc)
		dl_dataset_free(d);
	return rc;
}
