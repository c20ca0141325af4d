/* torchvision's transforms on a uint8 image tensor, as dlrun's `data:`
 * pipelines run them: resize (bilinear with antialiasing, as
 * torch.nn.functional.interpolate(antialias=True): width, then height,
 * rounded to whole levels), crops, flips, grayscale, to_float, normalize. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/imgproc.h"

const char *dl_img_op_name(enum dl_img_op op)
{
	static const char *const names[] = {"resize", "center_crop", "random_resized_crop",
					    "horizontal_flip", "grayscale", "to_float",
					    "normalize"};
	return (unsigned)op < sizeof names / sizeof names[0] ? names[op] : "?";
}

int dl_pipeline_random(const struct dl_pipeline *pipe)
{
	for (int i = 0; i < pipe->n; i++)
		if (pipe->step[i].op == DL_IMG_RANDOM_RESIZED_CROP ||
		    (pipe->step[i].op == DL_IMG_HFLIP && pipe->step[i].p > 0))
			return 1;
	return 0;
}

static int oom(struct dl_error *err)
{
	return dl_error_set(err, DL_ERUN, "out of memory preparing an image");
}

/* The triangle filter's taps for one axis of in -> out samples:
 * out * k weights, each output's taps start at lo[i] and count n[i]. */
static int aa_taps(int in, int out, int *k, int **lo, int **n, float **w)
{
	double scale = (double)in / (double)out;
	double support = scale >= 1.0 ? scale : 1.0;
	double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
	*k = (int)ceil(support) * 2 + 1;
	*lo = malloc((size_t)out * sizeof **lo);
	*n = malloc((size_t)out * sizeof **n);
	*w = calloc((size_t)out * (size_t)*k, sizeof **w);
	if (!*lo || !*n || !*w)
		return -1;
	for (int i = 0; i < out; i++) {
		double center = scale * (i + 0.5);
		int64_t xmin = (int64_t)(center - support + 0.5);
		if (xmin < 0)
			xmin = 0;
		int64_t xmax = (int64_t)(center + support + 0.5);
		if (xmax > in)
			xmax = in;
		int size = (int)(xmax - xmin);
		if (size > *k)
			size = *k;
		double total = 0, tap[64 + 1];
		double *t = size <= 64 ? tap : malloc((size_t)size * sizeof *t);
		if (!t)
			return -1;
		for (int j = 0; j < size; j++) {
			double x = fabs((j + xmin - center + 0.5) * invscale);
			t[j] = x < 1.0 ? 1.0 - x : 0.0;
			total += t[j];
		}
		for (int j = 0; j < size; j++)
			(*w)[(size_t)i * (size_t)*k + (size_t)j] = (float)(total != 0 ? t[j] / total : 0);
		if (t != tap)
			free(t);
		(*lo)[i] = (int)xmin;
		(*n)[i] = size;
	}
	return 0;
}

/* One axis: src [outer, in, inner] -> dst [outer, out, inner]. */
static int resize_axis(const float *src, float *dst, int64_t outer, int in, int out,
		       int64_t inner)
{
	int k, *lo = NULL, *n = NULL;
	float *w = NULL;
	int rc = aa_taps(in, out, &k, &lo, &n, &w);
	if (rc == 0) {
		/* each output a sum over its taps in order: rows of inner values
		 * are added tap by tap (contiguous), in the same order */
		for (int64_t o = 0; o < outer; o++)
			for (int i = 0; i < out; i++) {
				const float *wi = w + (size_t)i * (size_t)k;
				float *d = dst + (o * out + i) * inner;
				if (inner == 1) {   /* along rows: a sum in a register */
					float acc = 0;
					for (int j = 0; j < n[i]; j++)
						acc += wi[j] * src[o * in + lo[i] + j];
					*d = acc;
					continue;
				}
				for (int64_t x = 0; x < inner; x++)
					d[x] = 0;
				for (int j = 0; j < n[i]; j++) {
					const float *sj = src + (o * in + lo[i] + j) * inner;
					float wj = wi[j];
					for (int64_t x = 0; x < inner; x++)
						d[x] += wj * sj[x];
				}
			}
	}
	free(lo);
	free(n);
	free(w);
	return rc;
}

int dl_img_resize(struct dl_img_buf *b, int h, int w, struct dl_error *err)
{
	if (h < 1 || w < 1 || (int64_t)h * w > DL_IMAGE_MAX_PIXELS)
		return dl_error_set(err, DL_EINPUT, "resize to %dx%d: out of range", h, w);
	if (h == b->h && w == b->w)
		return 0;
	float *mid = malloc((size_t)b->c * (size_t)b->h * (size_t)w * sizeof *mid);
	float *out = malloc((size_t)b->c * (size_t)h * (size_t)w * sizeof *out);
	int rc = !mid || !out;
	if (!rc)
		rc = resize_axis(b->v, mid, (int64_t)b->c * b->h, b->w, w, 1);
	if (!rc)
		rc = resize_axis(mid, out, b->c, b->h, h, w);
	free(mid);
	if (rc) {
		free(out);
		return oom(err);
	}
	size_t n = (size_t)b->c * (size_t)h * (size_t)w;
	if (b->bytes)   /* torch.round (half to even), then uint8 */
		for (size_t i = 0; i < n; i++) {
			float r = nearbyintf(out[i]);
			out[i] = r < 0 ? 0 : r > 255 ? 255 : r;
		}
	free(b->v);
	b->v = out;
	b->h = h;
	b->w = w;
	return 0;
}

int dl_img_crop(struct dl_img_buf *b, int top, int left, int h, int w, struct dl_error *err)
{
	if (h < 1 || w < 1 || (int64_t)h * w > DL_IMAGE_MAX_PIXELS)
		return dl_error_set(err, DL_EINPUT, "crop to %dx%d: out of range", h, w);
	float *out = calloc((size_t)b->c * (size_t)h * (size_t)w, sizeof *out);
	if (!out)
		return oom(err);
	for (int c = 0; c < b->c; c++)
		for (int y = 0; y < h; y++) {
			int sy = top + y;
			if (sy < 0 || sy >= b->h)
				continue;
			for (int x = 0; x < w; x++) {
				int sx = left + x;
				if (sx >= 0 && sx < b->w)
					out[((size_t)c * h + y) * w + x] =
						b->v[((size_t)c * b->h + sy) * b->w + sx];
			}
		}
	free(b->v);
	b->v = out;
	b->h = h;
	b->w = w;
	return 0;
}

/* torchvision's _compute_resized_output_size: the shorter side to s, the
 * longer int(s * long / short). */
static void shorter_side(int h, int w, int64_t s, int64_t *oh, int64_t *ow)
{
	if (w <= h) {
		*ow = s;
		*oh = (int64_t)((double)s * h / w);
	} else {
		*oh = s;
		*ow = (int64_t)((double)s * w / h);
	}
}

/* Python's round(): half to even. */
static int pyround(double x)
{
	return (int)nearbyint(x);
}

/* torchvision's RandomResizedCrop.get_params with dlrun's generator. */
static void rrc_params(const struct dl_img_step *s, int H, int W, struct dl_rng *rng,
		       int *top, int *left, int *h, int *w)
{
	double area = (double)H * W;
	double lr0 = log(s->ratio[0]), lr1 = log(s->ratio[1]);
	for (int tries = 0; tries < 10; tries++) {
		double target = area * (s->scale[0] + (s->scale[1] - s->scale[0]) * dl_rng_uniform(rng));
		double ar = exp(lr0 + (lr1 - lr0) * dl_rng_uniform(rng));
		int cw = pyround(sqrt(target * ar)), ch = pyround(sqrt(target / ar));
		if (cw > 0 && cw <= W && ch > 0 && ch <= H) {
			*top = (int)dl_rng_below(rng, (uint64_t)(H - ch + 1));
			*left = (int)dl_rng_below(rng, (uint64_t)(W - cw + 1));
			*h = ch;
			*w = cw;
			return;
		}
	}
	double in_ratio = (double)W / H;
	double rmin = fmin(s->ratio[0], s->ratio[1]), rmax = fmax(s->ratio[0], s->ratio[1]);
	if (in_ratio < rmin) {
		*w = W;
		*h = pyround(*w / rmin);
	} else if (in_ratio > rmax) {
		*h = H;
		*w = pyround(*h * rmax);
	} else {
		*w = W;
		*h = H;
	}
	*top = (H - *h) / 2;
	*left = (W - *w) / 2;
}

static int step_error(const struct dl_img_step *s, const char *name, struct dl_error *err,
		      const char *what)
{
	return dl_error_set(err, DL_EINPUT, "%s: data step %s: %s", name, dl_img_op_name(s->op),
			    what);
}

static int run_step(const struct dl_img_step *s, struct dl_img_buf *b, struct dl_rng *rng,
		    const char *name, struct dl_error *err)
{
	size_t plane = (size_t)b->h * (size_t)b->w;
	char msg[160];
	switch (s->op) {
	case DL_IMG_RESIZE: {
		int64_t oh = s->size[0], ow = s->n_size == 2 ? s->size[1] : 0;
		if (s->n_size == 1)
			shorter_side(b->h, b->w, s->size[0], &oh, &ow);
		if (oh < 1 || ow < 1 || oh * ow > DL_IMAGE_MAX_PIXELS) {
			snprintf(msg, sizeof msg, "a %dx%d image would become %lldx%lld", b->h,
				 b->w, (long long)oh, (long long)ow);
			return step_error(s, name, err, msg);
		}
		return dl_img_resize(b, (int)oh, (int)ow, err);
	}
	case DL_IMG_CENTER_CROP: {
		int h = (int)s->size[0], w = (int)s->size[1];
		/* torchvision pads a smaller image with zeros around it */
		int top = h > b->h ? -((h - b->h) / 2) : pyround((b->h - h) / 2.0);
		int left = w > b->w ? -((w - b->w) / 2) : pyround((b->w - w) / 2.0);
		return dl_img_crop(b, top, left, h, w, err);
	}
	case DL_IMG_RANDOM_RESIZED_CROP: {
		int top, left, h, w;
		rrc_params(s, b->h, b->w, rng, &top, &left, &h, &w);
		int rc = dl_img_crop(b, top, left, h, w, err);
		return rc ? rc : dl_img_resize(b, (int)s->size[0], (int)s->size[1], err);
	}
	case DL_IMG_HFLIP:
		if (s->p > 0 && dl_rng_uniform(rng) < s->p)
			for (int c = 0; c < b->c; c++)
				for (int y = 0; y < b->h; y++) {
					float *r = b->v + (size_t)c * plane + (size_t)y * b->w;
					for (int x = 0, z = b->w - 1; x < z; x++, z--) {
						float t = r[x];
						r[x] = r[z];
						r[z] = t;
					}
				}
		return 0;
	case DL_IMG_GRAYSCALE: {
		/* torchvision's rgb_to_grayscale on a tensor: a uint8 result
		 * is truncated */
		if (b->c == 3) {
			for (size_t i = 0; i < plane; i++) {
				float l = 0.2989f * b->v[i] + 0.587f * b->v[plane + i] +
					  0.114f * b->v[2 * plane + i];
				b->v[i] = b->bytes ? floorf(l) : l;
			}
		} else if (b->c != 1) {
			return step_error(s, name, err, "needs 1 or 3 channels");
		}
		b->c = 1;
		if (s->channels == 3) {
			float *v = realloc(b->v, 3 * plane * sizeof *v);
			if (!v)
				return oom(err);
			b->v = v;
			memcpy(v + plane, v, plane * sizeof *v);
			memcpy(v + 2 * plane, v, plane * sizeof *v);
			b->c = 3;
		}
		return 0;
	}
	case DL_IMG_TO_FLOAT:
		if (b->bytes)
			for (size_t i = 0; i < plane * (size_t)b->c; i++)
				b->v[i] = b->v[i] / 255.0f;
		b->bytes = 0;
		return 0;
	case DL_IMG_NORMALIZE:
		if (s->n_ch != 1 && s->n_ch != b->c) {
			snprintf(msg, sizeof msg, "mean and std have %d values for an image of %d "
				 "channels", s->n_ch, b->c);
			return step_error(s, name, err, msg);
		}
		for (int c = 0; c < b->c; c++) {
			float m = s->mean[s->n_ch == 1 ? 0 : c], sd = s->std[s->n_ch == 1 ? 0 : c];
			float *p = b->v + (size_t)c * plane;
			for (size_t i = 0; i < plane; i++)
				p[i] = (p[i] - m) / sd;
		}
		b->bytes = 0;
		return 0;
	}
	return step_error(s, name, err, "unknown step");
}

int dl_pipeline_run(const struct dl_pipeline *pipe, const struct dl_image *img, int want_c,
		    struct dl_rng *rng, struct dl_img_buf *out, const char *name,
		    struct dl_error *err)
{
	memset(out, 0, sizeof *out);
	struct dl_rng fixed;
	if (!rng) {
		dl_rng_seed(&fixed, 0);
		rng = &fixed;
	}
	int c = img->c == 1 && want_c == 3 ? 3 : img->c;
	size_t plane = (size_t)img->w * (size_t)img->h;
	out->v = malloc((size_t)c * plane * sizeof *out->v);
	if (!out->v)
		return oom(err);
	out->c = c;
	out->h = img->h;
	out->w = img->w;
	out->bytes = 1;
	for (int k = 0; k < c; k++)
		for (size_t i = 0; i < plane; i++)
			out->v[(size_t)k * plane + i] =
				img->px[i * (size_t)img->c + (size_t)(img->c == 1 ? 0 : k)];
	for (int i = 0; i < pipe->n; i++) {
		int rc = run_step(&pipe->step[i], out, rng, name, err);
		if (rc) {
			free(out->v);
			out->v = NULL;
			return rc;
		}
	}
	return 0;
}
