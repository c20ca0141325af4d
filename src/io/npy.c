/* NumPy .npy on streams: the header is parsed as the Python dict literal it
 * is, and exactly the array's bytes are read, so arrays can follow each other
 * on a pipe to a co-process. Writes version 1.0 '<f4' byte for byte as NumPy. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/npy.h"

#define NPY_MAX_HEADER 65536  /* NumPy caps at 10000; be lenient, not blind */

static int host_le(void)
{
	const uint16_t one = 1;
	return *(const unsigned char *)&one == 1;
}

static uint64_t le_bytes(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static float f16_to_f32(uint16_t h)
{
	int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	float v;
	if (exp == 0)
		v = ldexpf((float)man, -24);    /* zero and subnormals */
	else if (exp == 31)
		v = man ? NAN : INFINITY;
	else
		v = ldexpf((float)(man | 0x400), exp - 25);
	return (h & 0x8000) ? -v : v;
}

size_t dl_dtype_size(enum dl_dtype t)
{
	switch (t) {
	case DL_F64: case DL_I64: return 8;
	case DL_F32: case DL_I32: return 4;
	case DL_F16: case DL_BF16: return 2;
	case DL_U8: return 1;
	}
	return 0;
}

/* The element at p as a double (exact for every dtype but I64). */
static double elem_f64(enum dl_dtype t, const unsigned char *p)
{
	uint64_t u;
	uint32_t u32;
	float f;
	double d;
	switch (t) {
	case DL_F32:
		u32 = (uint32_t)le_bytes(p, 4);
		memcpy(&f, &u32, 4);
		return f;
	case DL_F64:
		u = le_bytes(p, 8);
		memcpy(&d, &u, 8);
		return d;
	case DL_F16: return f16_to_f32((uint16_t)le_bytes(p, 2));
	case DL_BF16:
		u32 = (uint32_t)le_bytes(p, 2) << 16;
		memcpy(&f, &u32, 4);
		return f;
	case DL_I32: return (int32_t)(uint32_t)le_bytes(p, 4);
	case DL_I64: return (double)(int64_t)le_bytes(p, 8);
	case DL_U8: return p[0];
	}
	return 0;
}

void dl_dtype_to_f32(enum dl_dtype t, const void *src, size_t n, float *dst)
{
	const unsigned char *p = src;
	size_t isz = dl_dtype_size(t);
	if (t == DL_F32 && host_le()) {
		memcpy(dst, src, n * 4);
		return;
	}
	for (size_t i = 0; i < n; i++)
		dst[i] = (float)elem_f64(t, p + i * isz);
}

int64_t dl_dtype_to_i64(enum dl_dtype t, const void *src, size_t n,
			int64_t *dst)
{
	const unsigned char *p = src;
	size_t isz = dl_dtype_size(t);
	for (size_t i = 0; i < n; i++) {
		if (t == DL_I64) {
			dst[i] = (int64_t)le_bytes(p + i * 8, 8);
			continue;
		}
		double v = elem_f64(t, p + i * isz);
		/* 2^63 itself is out of range; -2^63 is in */
		if (!(v == floor(v) && v >= -9223372036854775808.0 &&
		      v < 9223372036854775808.0))
			return (int64_t)i;
		dst[i] = (int64_t)v;
	}
	return -1;
}

/* ---- header parsing ---- */

struct parser {
	const char *s, *end, *start;
	const char *name;
	struct dl_error *err;
};

static int perr(struct parser *p, const char *what)
{
	return dl_error_set(p->err, DL_EINPUT,
			    "%s: malformed .npy header: %s at header byte %ld",
			    p->name, what, (long)(p->s - p->start));
}

static void skip_ws(struct parser *p)
{
	while (p->s < p->end && strchr(" \t\n\r\f\v", *p->s) && *p->s)
		p->s++;
}

static int peek(struct parser *p)
{
	skip_ws(p);
	return p->s < p->end ? (unsigned char)*p->s : -1;
}

static int expect(struct parser *p, char c, const char *what)
{
	if (peek(p) != c)
		return perr(p, what);
	p->s++;
	return 0;
}

/* A quoted string without escapes (NumPy never writes any in a header). */
static int parse_str(struct parser *p, char *out, size_t size)
{
	int q = peek(p);
	if (q != '\'' && q != '"')
		return perr(p, "expected a quoted string");
	const char *b = ++p->s;
	while (p->s < p->end && *p->s != q && *p->s != '\\' && *p->s != '\n' &&
	       *p->s)
		p->s++;
	if (p->s >= p->end || *p->s != q)
		return perr(p, "unterminated or escaped string");
	size_t n = (size_t)(p->s - b);
	p->s++;
	if (n >= size)
		n = size - 1;   /* callers compare the result: too long never matches */
	memcpy(out, b, n);
	out[n] = '\0';
	return 0;
}

static int parse_bool(struct parser *p, int *v)
{
	skip_ws(p);
	size_t left = (size_t)(p->end - p->s);
	if (left >= 4 && !memcmp(p->s, "True", 4)) {
		*v = 1;
		p->s += 4;
	} else if (left >= 5 && !memcmp(p->s, "False", 5)) {
		*v = 0;
		p->s += 5;
	} else {
		return perr(p, "fortran_order must be True or False");
	}
	return 0;
}

/* (), (3,), (3, 4), (3, 4,); Python 2 writers may add an 'L' suffix. */
static int parse_shape(struct parser *p, struct dl_shape *s)
{
	s->ndim = 0;
	if (expect(p, '(', "shape must be a tuple"))
		return DL_EINPUT;
	int comma = 0;
	while (peek(p) != ')') {
		if (s->ndim && !comma)
			return perr(p, "expected ',' or ')' in shape");
		if (s->ndim == DL_MAX_DIMS)
			return perr(p, "shape has more than 8 dimensions");
		if (peek(p) < '0' || peek(p) > '9')
			return perr(p, "shape entries must be non-negative integers");
		int64_t d = 0;
		while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
			d = d * 10 + (*p->s++ - '0');
			if (d > DL_MAX_NUMEL)
				return perr(p, "dimension too large");
		}
		if (p->s < p->end && *p->s == 'L')
			p->s++;
		s->d[s->ndim++] = d;
		comma = peek(p) == ',';
		if (comma)
			p->s++;
	}
	if (s->ndim == 1 && !comma)
		return perr(p, "a one-element shape needs a trailing comma, as in (3,)");
	p->s++;
	return 0;
}

static int set_dtype(struct parser *p, const char *d, enum dl_dtype *t)
{
	static const struct { const char *descr; enum dl_dtype t; } known[] = {
		{ "<f4", DL_F32 }, { "<f8", DL_F64 }, { "<f2", DL_F16 },
		{ "<i4", DL_I32 }, { "<i8", DL_I64 },
		{ "|u1", DL_U8 }, { "<u1", DL_U8 }, { ">u1", DL_U8 },
		/* NumPy's bool (masks saved from torch or numpy): one byte,
		 * 0 or 1, read as the integers 0 and 1 */
		{ "|b1", DL_U8 },
	};
	for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
		if (!strcmp(d, known[i].descr)) {
			*t = known[i].t;
			return 0;
		}
	if (d[0] == '>')
		return dl_error_set(p->err, DL_EINPUT,
				    "%s: big-endian dtype '%s' is not supported; "
				    "save little-endian data, e.g. a.astype('<%s')",
				    p->name, d, d + 1);
	return dl_error_set(p->err, DL_EINPUT,
			    "%s: unsupported .npy dtype '%s' (dlrun reads <f4, "
			    "<f8, <f2, <i4, <i8, |u1 and |b1)", p->name, d);
}

static int parse_dict(struct parser *p, struct dl_npy_header *h)
{
	int seen_descr = 0, seen_fortran = 0, seen_shape = 0;
	char key[32], descr[32];
	if (expect(p, '{', "expected '{'"))
		return DL_EINPUT;
	while (peek(p) != '}') {
		if (parse_str(p, key, sizeof key) ||
		    expect(p, ':', "expected ':' after a key"))
			return DL_EINPUT;
		int *seen = !strcmp(key, "descr") ? &seen_descr :
			    !strcmp(key, "fortran_order") ? &seen_fortran :
			    !strcmp(key, "shape") ? &seen_shape : NULL;
		if (!seen)
			return dl_error_set(p->err, DL_EINPUT,
					    "%s: malformed .npy header: unexpected key "
					    "'%s' (expected descr, fortran_order, shape)",
					    p->name, key);
		if (*seen)
			return dl_error_set(p->err, DL_EINPUT,
					    "%s: malformed .npy header: key '%s' "
					    "appears twice", p->name, key);
		*seen = 1;
		int rc;
		if (seen == &seen_descr) {
			if (peek(p) == '[')
				return dl_error_set(p->err, DL_EINPUT,
						    "%s: structured .npy dtypes are "
						    "not supported", p->name);
			rc = parse_str(p, descr, sizeof descr);
		} else if (seen == &seen_fortran) {
			rc = parse_bool(p, &h->fortran);
		} else {
			rc = parse_shape(p, &h->shape);
		}
		if (rc)
			return rc;
		if (peek(p) == ',')
			p->s++;
		else if (peek(p) != '}')
			return perr(p, "expected ',' or '}'");
	}
	p->s++;
	if (peek(p) != -1)
		return perr(p, "unexpected text after the dict");
	if (!seen_descr || !seen_fortran || !seen_shape)
		return dl_error_set(p->err, DL_EINPUT,
				    "%s: malformed .npy header: missing key '%s'",
				    p->name, !seen_descr ? "descr" :
				    !seen_fortran ? "fortran_order" : "shape");
	return set_dtype(p, descr, &h->dtype);
}

/* fread of exactly n bytes; returns the count actually read. */
static size_t read_full(FILE *f, void *buf, size_t n)
{
	return n ? fread(buf, 1, n, f) : 0;
}

static int read_fail(FILE *f, const char *name, const char *what,
		     size_t want, size_t got, struct dl_error *err)
{
	if (ferror(f))
		return dl_error_set(err, DL_ERUN, "%s: read error: %s", name,
				    strerror(errno));
	return dl_error_set(err, DL_EINPUT,
			    "%s: truncated .npy %s: expected %zu bytes, got %zu",
			    name, what, want, got);
}

int dl_npy_read_header(FILE *f, const char *name, struct dl_npy_header *h,
		       struct dl_error *err)
{
	static const unsigned char magic[6] = "\x93NUMPY";
	unsigned char pre[12];
	memset(h, 0, sizeof *h);
	/* One byte first: nothing at all is a clean end of stream, and a
	 * wrong first byte is reported without waiting for more. */
	if (read_full(f, pre, 1) != 1) {
		if (ferror(f))
			return read_fail(f, name, "", 1, 0, err);
		return 0;
	}
	if (pre[0] != magic[0])
		return dl_error_set(err, DL_EINPUT,
				    "%s: not a .npy array: bad magic (first byte "
				    "0x%02x, expected 0x93 'NUMPY')", name, pre[0]);
	size_t got = 1 + read_full(f, pre + 1, 7);
	if (got < 8 && !memcmp(pre, magic, got < 6 ? got : 6))
		return read_fail(f, name, "header", 8, got, err);
	if (memcmp(pre, magic, 6))
		return dl_error_set(err, DL_EINPUT,
				    "%s: not a .npy array: bad magic (expected "
				    "\\x93NUMPY)", name);
	int major = pre[6], minor = pre[7];
	if (major < 1 || major > 3 || minor != 0)
		return dl_error_set(err, DL_EINPUT,
				    "%s: unsupported .npy version %d.%d (dlrun "
				    "reads 1.0, 2.0 and 3.0)", name, major, minor);
	int lsize = major == 1 ? 2 : 4;
	got = read_full(f, pre + 8, (size_t)lsize);
	if (got < (size_t)lsize)
		return read_fail(f, name, "header", 8 + (size_t)lsize, 8 + got, err);
	uint64_t hlen = le_bytes(pre + 8, lsize);
	if (hlen == 0 || hlen > NPY_MAX_HEADER)
		return dl_error_set(err, DL_EINPUT,
				    "%s: .npy header length %llu is out of range "
				    "(1 to %d)", name, (unsigned long long)hlen,
				    NPY_MAX_HEADER);
	char *text = malloc((size_t)hlen);
	if (!text)
		return dl_error_set(err, DL_ERUN, "%s: out of memory", name);
	got = read_full(f, text, (size_t)hlen);
	int rc = 0;
	if (got < hlen) {
		rc = read_fail(f, name, "header", (size_t)hlen, got, err);
	} else {
		struct parser p = { text, text + hlen, text, name, err };
		rc = parse_dict(&p, h);
	}
	free(text);
	if (rc)
		return rc;
	h->numel = dl_shape_numel(&h->shape);
	size_t isz = dl_dtype_size(h->dtype);
	if (h->numel < 0 || (uint64_t)h->numel > SIZE_MAX / isz) {
		char buf[256];
		return dl_error_set(err, DL_EINPUT,
				    "%s: .npy shape %s has too many elements (at "
				    "most 2^40)", name,
				    dl_shape_str(&h->shape, buf, sizeof buf));
	}
	h->data_bytes = (size_t)h->numel * isz;
	return 1;
}

/* ---- data ---- */

/* Reads count elements in file order and converts them. base and total
 * are only for messages: elements already read, and the array's byte size. */
static int read_elems(FILE *f, const char *name, const struct dl_npy_header *h,
		      int64_t count, void *dst, int to_i64, int64_t base,
		      size_t total, struct dl_error *err)
{
	unsigned char buf[1 << 16];
	size_t isz = dl_dtype_size(h->dtype);
	size_t per = sizeof buf / isz;
	size_t done = 0, n = (size_t)count;
	while (done < n) {
		size_t k = n - done < per ? n - done : per;
		size_t got = read_full(f, buf, k * isz);
		if (got < k * isz)
			return read_fail(f, name, "data", total,
					 (size_t)base * isz + done * isz + got, err);
		if (!to_i64) {
			dl_dtype_to_f32(h->dtype, buf, k, (float *)dst + done);
		} else {
			int64_t bad = dl_dtype_to_i64(h->dtype, buf, k,
						      (int64_t *)dst + done);
			if (bad >= 0)
				return dl_error_set(err, DL_EINPUT,
						    "%s: element %lld is not a whole "
						    "number in int64 range",
						    name, (long long)(base +
						    (int64_t)done + bad));
		}
		done += k;
	}
	return 0;
}

/* Reorders a whole column-major array into row-major order. */
static int fortran_to_c(const struct dl_shape *s, int64_t numel, size_t esz,
			void *data, const char *name, struct dl_error *err)
{
	if (s->ndim < 2 || numel == 0)
		return 0;
	unsigned char *src = malloc((size_t)numel * esz), *dst = data;
	if (!src)
		return dl_error_set(err, DL_ERUN, "%s: out of memory", name);
	memcpy(src, data, (size_t)numel * esz);
	int64_t idx[DL_MAX_DIMS] = { 0 }, stride[DL_MAX_DIMS];
	stride[0] = 1;
	for (int k = 1; k < s->ndim; k++)
		stride[k] = stride[k - 1] * s->d[k - 1];
	int64_t off = 0;
	for (int64_t c = 0; c < numel; c++) {
		memcpy(dst + (size_t)c * esz, src + (size_t)off * esz, esz);
		/* advance the C index, last axis fastest */
		for (int k = s->ndim - 1; k >= 0; k--) {
			off += stride[k];
			if (++idx[k] < s->d[k])
				break;
			off -= stride[k] * idx[k];
			idx[k] = 0;
		}
	}
	free(src);
	return 0;
}

static int read_public(FILE *f, const char *name, const struct dl_npy_header *h,
		       int64_t count, void *dst, int to_i64, struct dl_error *err)
{
	if (count < 0 || count > h->numel ||
	    (h->fortran && h->shape.ndim > 1 && count != h->numel))
		return dl_error_set(err, DL_ERUN,
				    "%s: internal error: reading %lld of %lld "
				    "elements%s", name, (long long)count,
				    (long long)h->numel, h->fortran ?
				    " of a Fortran-order array" : "");
	int rc = read_elems(f, name, h, count, dst, to_i64, 0,
			    (size_t)count * dl_dtype_size(h->dtype), err);
	if (rc == 0 && h->fortran)
		rc = fortran_to_c(&h->shape, h->numel, to_i64 ? 8 : 4, dst,
				  name, err);
	return rc;
}

int dl_npy_read_f32(FILE *f, const char *name, const struct dl_npy_header *h,
		    int64_t count, float *dst, struct dl_error *err)
{
	return read_public(f, name, h, count, dst, 0, err);
}

int dl_npy_read_i64(FILE *f, const char *name, const struct dl_npy_header *h,
		    int64_t count, int64_t *dst, struct dl_error *err)
{
	return read_public(f, name, h, count, dst, 1, err);
}

int dl_npy_read(FILE *f, const char *name, struct dl_tensor *t,
		struct dl_error *err)
{
	struct dl_npy_header h;
	t->data = NULL;
	int rc = dl_npy_read_header(f, name, &h, err);
	if (rc <= 0)
		return rc;
	/* Grow with the data actually read: a header that claims terabytes
	 * over a short stream ends as truncation, not as a huge allocation. */
	int64_t cap = h.numel < (1 << 22) ? h.numel : (1 << 22), done = 0;
	float *data = malloc(cap ? (size_t)cap * 4 : 1);
	while (data && done < h.numel) {
		if (done == cap) {
			cap = cap > h.numel / 2 ? h.numel : cap * 2;
			float *more = realloc(data, (size_t)cap * 4);
			if (!more) {
				free(data);
				data = NULL;
				break;
			}
			data = more;
		}
		rc = read_elems(f, name, &h, cap - done, data + done, 0, done,
				h.data_bytes, err);
		if (rc) {
			free(data);
			return rc;
		}
		done = cap;
	}
	if (!data)
		return dl_error_set(err, DL_ERUN, "%s: out of memory", name);
	if (h.fortran && (rc = fortran_to_c(&h.shape, h.numel, 4, data, name,
					    err))) {
		free(data);
		return rc;
	}
	t->shape = h.shape;
	t->data = data;
	return 1;
}

/* ---- writing ---- */

static int write_fail(const char *name, struct dl_error *err)
{
	return dl_error_set(err, DL_ERUN, "%s: write error: %s", name,
			    strerror(errno));
}

int dl_npy_write_header(FILE *f, const char *name, const struct dl_shape *s,
			struct dl_error *err)
{
	if (dl_shape_numel(s) < 0)
		return dl_error_set(err, DL_ERUN, "%s: internal error: invalid "
				    "shape to write", name);
	char buf[512];
	int n = snprintf(buf, sizeof buf,
			 "{'descr': '<f4', 'fortran_order': False, 'shape': (");
	for (int i = 0; i < s->ndim; i++)
		n += snprintf(buf + n, sizeof buf - (size_t)n, "%s%lld",
			      i ? ", " : "", (long long)s->d[i]);
	n += snprintf(buf + n, sizeof buf - (size_t)n, "%s), }",
		      s->ndim == 1 ? "," : "");
	/* NumPy (1.24) leaves room to grow the first axis in place. */
	if (s->ndim > 0) {
		char first[24];
		int w = snprintf(first, sizeof first, "%lld", (long long)s->d[0]);
		for (int i = w; i < 21; i++)
			buf[n++] = ' ';
	}
	/* prefix 10 bytes + text + padding + '\n' is a multiple of 64; an
	 * already aligned header still gets 64 spaces, as in NumPy */
	int pad = 64 - (10 + n + 1) % 64;
	memset(buf + n, ' ', (size_t)pad);
	n += pad;
	buf[n++] = '\n';
	unsigned char pre[10] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
				  (unsigned char)(n & 0xff),
				  (unsigned char)(n >> 8) };
	if (fwrite(pre, 1, 10, f) != 10 || fwrite(buf, 1, (size_t)n, f) != (size_t)n)
		return write_fail(name, err);
	return 0;
}

int dl_npy_write_f32(FILE *f, const char *name, const float *data,
		     int64_t count, struct dl_error *err)
{
	if (count <= 0)
		return 0;
	if (host_le()) {
		if (fwrite(data, 4, (size_t)count, f) != (size_t)count)
			return write_fail(name, err);
		return 0;
	}
	unsigned char buf[4096];
	for (int64_t i = 0; i < count; i += 1024) {
		int64_t k = count - i < 1024 ? count - i : 1024;
		for (int64_t j = 0; j < k; j++) {
			uint32_t u;
			memcpy(&u, data + i + j, 4);
			for (int b = 0; b < 4; b++)
				buf[j * 4 + b] = (unsigned char)(u >> (8 * b));
		}
		if (fwrite(buf, 4, (size_t)k, f) != (size_t)k)
			return write_fail(name, err);
	}
	return 0;
}

int dl_npy_write(FILE *f, const char *name, const struct dl_tensor *t,
		 struct dl_error *err)
{
	int rc = dl_npy_write_header(f, name, &t->shape, err);
	if (rc)
		return rc;
	return dl_npy_write_f32(f, name, t->data, dl_shape_numel(&t->shape), err);
}
