/* Training data: x and y arrays from .npy files or .npz members, held as
 * float32 samples and int64 class ids (or float targets). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/npy.h"
#include "io/npz.h"
#include "train/data.h"

void dl_dataset_free(struct dl_dataset *d)
{
	if (!d)
		return;
	free(d->x);
	free(d->ids);
	free(d->targets);
	memset(d, 0, sizeof *d);
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
		      float **fx, int64_t **ids, struct dl_error *err)
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
		rc = read_array(f, name, 0, &d->xshape, &d->x, NULL, err);
		if (f != stdin)
			fclose(f);
		if (rc == DL_EINPUT && x_is_int && strstr(err->msg, "must hold floats")) {
			/* token ids: integers read as floats */
			dl_error_clear(err);
			free(d->x);
			d->x = NULL;
			f = open_array(xpath, xmember, &z, name, sizeof name, err);
			int64_t *tmp = NULL;
			rc = f ? read_array(f, name, 1, &d->xshape, NULL, &tmp, err) : DL_EINPUT;
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
			rc = read_array(f, name, ids, &d->yshape, &d->targets, &d->ids, err);
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
