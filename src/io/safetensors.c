/* safetensors read and write. The reader maps the file and makes every check
 * the reference reader makes (header size, strict JSON, known dtypes, byte
 * sizes, data buffer tiled with no hole or overlap) before anything is used;
 * the writer produces bytes that depend only on its arguments. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/atomic.h"
#include "io/safetensors.h"

#define ST_MAX_HEADER 100000000ULL

/* Every dtype of the format, with its size in bits (F4 and F6 pack). */
static const struct {
	const char *name;
	int bits;
	int dtype;  /* enum dl_dtype, or -1: valid but only skipped */
} dtypes[] = {
	{ "F32", 32, DL_F32 }, { "F64", 64, DL_F64 }, { "F16", 16, DL_F16 },
	{ "BF16", 16, DL_BF16 }, { "I32", 32, DL_I32 }, { "I64", 64, DL_I64 },
	{ "U8", 8, DL_U8 }, { "BOOL", 8, -1 }, { "I8", 8, -1 },
	{ "I16", 16, -1 }, { "U16", 16, -1 }, { "U32", 32, -1 },
	{ "U64", 64, -1 }, { "F8_E5M2", 8, -1 }, { "F8_E4M3", 8, -1 },
	{ "F8_E8M0", 8, -1 }, { "F6_E2M3", 6, -1 }, { "F6_E3M2", 6, -1 },
	{ "F4", 4, -1 },
};

void dl_st_close(struct dl_safetensors *st)
{
	if (!st)
		return;
	if (st->map)
		munmap(st->map, st->size);
	for (int i = 0; i < st->n; i++)
		free(st->t[i].name);
	for (int i = 0; i < 2 * st->n_meta; i++)
		free(st->meta[i]);
	free(st->t);
	free(st->meta);
	free(st->path);
	memset(st, 0, sizeof *st);
}

static int by_offset(const void *a, const void *b)
{
	const struct dl_st_tensor *x = a, *y = b;
	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct dl_st_tensor *)a)->name,
		      ((const struct dl_st_tensor *)b)->name);
}

static int get_uint(json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

/* Fills t from the header entry v; the offsets are checked against the
 * buffer size later, together. */
static int parse_tensor(const char *path, const char *name, json_t *v,
			struct dl_st_tensor *t, struct dl_error *err)
{
	json_t *dt = json_object_get(v, "dtype");
	json_t *shape = json_object_get(v, "shape");
	json_t *offs = json_object_get(v, "data_offsets");
	if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(shape) ||
	    !json_is_array(offs))
		return dl_error_set(err, DL_EINPUT, "%s: tensor '%s': expected "
				    "{\"dtype\": STRING, \"shape\": [...], "
				    "\"data_offsets\": [BEGIN, END]}", path, name);
	const char *dname = json_string_value(dt);
	int bits = 0;
	for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
		if (!strcmp(dname, dtypes[i].name)) {
			bits = dtypes[i].bits;
			t->dtype = dtypes[i].dtype;
			snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dname);
		}
	if (!bits)
		return dl_error_set(err, DL_EINPUT, "%s: tensor '%s': unknown "
				    "dtype '%s'", path, name, dname);
	size_t nd = json_array_size(shape);
	if (nd > DL_MAX_DIMS)
		return dl_error_set(err, DL_EINPUT, "%s: tensor '%s': %zu "
				    "dimensions, dlrun handles at most %d", path,
				    name, nd, DL_MAX_DIMS);
	t->shape.ndim = (int)nd;
	for (size_t i = 0; i < nd; i++) {
		uint64_t d;
		if (get_uint(json_array_get(shape, i), &d) || d > DL_MAX_NUMEL)
			return dl_error_set(err, DL_EINPUT, "%s: tensor '%s': "
					    "shape entries must be non-negative "
					    "integers (at most 2^40)", path, name);
		t->shape.d[i] = (int64_t)d;
	}
	char sbuf[256];
	dl_shape_str(&t->shape, sbuf, sizeof sbuf);
	t->numel = dl_shape_numel(&t->shape);
	if (t->numel < 0)
		return dl_error_set(err, DL_EINPUT, "%s: tensor '%s': shape %s "
				    "has too many elements", path, name, sbuf);
	uint64_t b, e;
	if (json_array_size(offs) != 2 || get_uint(json_array_get(offs, 0), &b) ||
	    get_uint(json_array_get(offs, 1), &e) || e < b)
		return dl_error_set(err, DL_EINPUT, "%s: tensor '%s': data_offsets "
				    "must be [BEGIN, END] with 0 <= BEGIN <= END",
				    path, name);
	/* numel <= 2^40 and bits <= 64: the product cannot overflow */
	uint64_t nbits = (uint64_t)t->numel * (uint64_t)bits;
	if (nbits % 8 || e - b != nbits / 8)
		return dl_error_set(err, DL_EINPUT, "%s: tensor '%s': data_offsets "
				    "[%llu, %llu] hold %llu bytes, shape %s %s "
				    "needs %s%llu", path, name,
				    (unsigned long long)b, (unsigned long long)e,
				    (unsigned long long)(e - b), sbuf, dname,
				    nbits % 8 ? "a whole number of bytes, not " : "",
				    (unsigned long long)(nbits / 8));
	t->offset = (size_t)b;
	t->nbytes = (size_t)(e - b);
	return 0;
}

static int parse_meta(struct dl_safetensors *st, json_t *m,
		      struct dl_error *err)
{
	if (!json_is_object(m))
		return dl_error_set(err, DL_EINPUT, "%s: __metadata__ must be an "
				    "object of strings", st->path);
	st->meta = calloc(2 * json_object_size(m) + 1, sizeof *st->meta);
	if (!st->meta)
		return dl_error_set(err, DL_ERUN, "%s: out of memory", st->path);
	const char *k;
	json_t *v;
	json_object_foreach(m, k, v) {
		if (!json_is_string(v))
			return dl_error_set(err, DL_EINPUT, "%s: __metadata__ "
					    "'%s': values must be strings",
					    st->path, k);
		st->meta[2 * st->n_meta] = strdup(k);
		st->meta[2 * st->n_meta + 1] = strdup(json_string_value(v));
		st->n_meta++;
		if (!st->meta[2 * st->n_meta - 2] || !st->meta[2 * st->n_meta - 1])
			return dl_error_set(err, DL_ERUN, "%s: out of memory",
					    st->path);
	}
	return 0;
}

/* The tensors sorted by offset must tile [0, bufsize) exactly. */
static int check_tiling(const struct dl_safetensors *st, size_t bufsize,
			struct dl_error *err)
{
	size_t at = 0;
	const char *prev = NULL;
	for (int i = 0; i < st->n; i++) {
		const struct dl_st_tensor *t = &st->t[i];
		if (t->offset > bufsize || t->nbytes > bufsize - t->offset)
			return dl_error_set(err, DL_EINPUT, "%s: tensor '%s': "
					    "data_offsets [%zu, %zu] reach past "
					    "the %zu-byte data buffer (truncated "
					    "file?)", st->path, t->name, t->offset,
					    t->offset + t->nbytes, bufsize);
		if (t->offset < at)
			return dl_error_set(err, DL_EINPUT, "%s: tensor '%s': "
					    "data_offsets [%zu, %zu] overlap tensor "
					    "'%s', which ends at %zu", st->path,
					    t->name, t->offset,
					    t->offset + t->nbytes, prev, at);
		if (t->offset > at)
			return dl_error_set(err, DL_EINPUT, "%s: bytes [%zu, %zu) "
					    "of the data buffer belong to no tensor "
					    "(before tensor '%s')", st->path, at,
					    t->offset, t->name);
		at = t->offset + t->nbytes;
		prev = t->name;
	}
	if (at != bufsize)
		return dl_error_set(err, DL_EINPUT, "%s: the data buffer has %zu "
				    "bytes but the tensors end at %zu", st->path,
				    bufsize, at);
	return 0;
}

static int parse_header(struct dl_safetensors *st, const char *text, size_t n,
			size_t bufsize, struct dl_error *err)
{
	json_error_t je;
	json_t *root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return dl_error_set(err, DL_EINPUT, "%s: header is not valid JSON: "
				    "%s (header byte %d)", st->path, je.text,
				    je.position);
	int rc = 0;
	if (!json_is_object(root)) {
		rc = dl_error_set(err, DL_EINPUT, "%s: header is not a JSON "
				  "object", st->path);
		goto out;
	}
	st->t = calloc(json_object_size(root) + 1, sizeof *st->t);
	if (!st->t) {
		rc = dl_error_set(err, DL_ERUN, "%s: out of memory", st->path);
		goto out;
	}
	const char *k;
	json_t *v;
	json_object_foreach(root, k, v) {
		if (!strcmp(k, "__metadata__")) {
			if ((rc = parse_meta(st, v, err)))
				goto out;
			continue;
		}
		struct dl_st_tensor *t = &st->t[st->n];
		if (!(t->name = strdup(k))) {
			rc = dl_error_set(err, DL_ERUN, "%s: out of memory",
					  st->path);
			goto out;
		}
		st->n++;
		if ((rc = parse_tensor(st->path, k, v, t, err)))
			goto out;
	}
	qsort(st->t, (size_t)st->n, sizeof *st->t, by_offset);
	if ((rc = check_tiling(st, bufsize, err)))
		goto out;
	qsort(st->t, (size_t)st->n, sizeof *st->t, by_name);
	/* JSON_REJECT_DUPLICATES catches these already; stay safe if a
	 * parser without it is ever used */
	for (int i = 1; i < st->n; i++)
		if (!strcmp(st->t[i - 1].name, st->t[i].name)) {
			rc = dl_error_set(err, DL_EINPUT, "%s: tensor '%s' appears "
					  "twice", st->path, st->t[i].name);
			goto out;
		}
out:
	json_decref(root);
	return rc;
}

static int check_file(struct dl_safetensors *st, const unsigned char *p,
		      struct dl_error *err);

/* Standard input's bytes, read once: a verb may open its weights more than
 * once (checked, then loaded), and a pipe reads only once. Kept for the
 * process's life; not for concurrent first reads from several threads. */
static unsigned char *stdin_bytes;
static size_t stdin_size;
static int stdin_read;

static int read_stdin(struct dl_error *err)
{
	if (stdin_read)
		return 0;
	size_t cap = 1 << 16, n = 0;
	unsigned char *b = malloc(cap);
	if (!b)
		return dl_error_set(err, DL_ERUN, "stdin: out of memory");
	for (;;) {
		if (n == cap) {
			unsigned char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(b, cap * 2);
			if (!nb) {
				free(b);
				return dl_error_set(err, DL_ERUN, "stdin: out of memory");
			}
			b = nb;
			cap *= 2;
		}
		size_t got = fread(b + n, 1, cap - n, stdin);
		n += got;
		if (got == 0)
			break;
	}
	if (ferror(stdin)) {
		free(b);
		return dl_error_set(err, DL_ERUN, "stdin: read error: %s", strerror(errno));
	}
	stdin_bytes = b;
	stdin_size = n;
	stdin_read = 1;
	return 0;
}

int dl_st_open(struct dl_safetensors *st, const char *path,
	       struct dl_error *err)
{
	memset(st, 0, sizeof *st);
	if (strcmp(path, "-") == 0) {   /* `-` is standard input */
		int rc = read_stdin(err);
		return rc ? rc : dl_st_open_buffer(st, "stdin", stdin_bytes, stdin_size, err);
	}
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return dl_error_set(err, DL_EINPUT, "%s: cannot open: %s", path,
				    strerror(errno));
	int rc = 0;
	struct stat sb;
	if (!(st->path = strdup(path))) {
		rc = dl_error_set(err, DL_ERUN, "%s: out of memory", path);
	} else if (fstat(fd, &sb) != 0) {
		rc = dl_error_set(err, DL_ERUN, "%s: %s", path, strerror(errno));
	} else if (!S_ISREG(sb.st_mode)) {
		rc = dl_error_set(err, DL_EINPUT, "%s: not a regular file", path);
	} else if (sb.st_size < 8) {
		rc = dl_error_set(err, DL_EINPUT, "%s: %lld bytes is too short for "
				  "a safetensors file (truncated?)", path,
				  (long long)sb.st_size);
	} else if ((uint64_t)sb.st_size > SIZE_MAX) {
		rc = dl_error_set(err, DL_EINPUT, "%s: file too large", path);
	} else {
		st->size = (size_t)sb.st_size;
		st->map = mmap(NULL, st->size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (st->map == MAP_FAILED) {
			st->map = NULL;
			rc = dl_error_set(err, DL_ERUN, "%s: cannot map: %s", path,
					  strerror(errno));
		}
	}
	close(fd);
	if (rc) {
		dl_st_close(st);
		return rc;
	}
	return check_file(st, st->map, err);
}

int dl_st_open_buffer(struct dl_safetensors *st, const char *path,
		      const void *buf, size_t size, struct dl_error *err)
{
	memset(st, 0, sizeof *st);
	if (!(st->path = strdup(path)))
		return dl_error_set(err, DL_ERUN, "%s: out of memory", path);
	if (size < 8) {
		int rc = dl_error_set(err, DL_EINPUT, "%s: %zu bytes is too short for "
				      "a safetensors file (truncated?)", path, size);
		dl_st_close(st);
		return rc;
	}
	st->size = size;
	return check_file(st, buf, err);
}

/* The header of the st->size bytes at p, checked; st->data set. Closes
 * st on error. */
static int check_file(struct dl_safetensors *st, const unsigned char *p,
		      struct dl_error *err)
{
	const char *path = st->path;
	int rc = 0;
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | p[i];
	/* compared before adding, so 8 + n cannot overflow */
	if (n > ST_MAX_HEADER)
		rc = dl_error_set(err, DL_EINPUT, "%s: header length %llu is over "
				  "the 100000000-byte limit (not a safetensors "
				  "file?)", path, (unsigned long long)n);
	else if (n > st->size - 8)
		rc = dl_error_set(err, DL_EINPUT, "%s: header length %llu reaches "
				  "past the end of the %zu-byte file (truncated?)",
				  path, (unsigned long long)n, st->size);
	else
		rc = parse_header(st, (const char *)p + 8, (size_t)n,
				  st->size - 8 - (size_t)n, err);
	if (rc) {
		dl_st_close(st);
		return rc;
	}
	st->data = p + 8 + n;
	return 0;
}

int dl_st_find(const struct dl_safetensors *st, const char *name)
{
	int lo = 0, hi = st->n - 1;
	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2;
		int c = strcmp(name, st->t[mid].name);
		if (c == 0)
			return mid;
		if (c < 0)
			hi = mid - 1;
		else
			lo = mid + 1;
	}
	return -1;
}

static int read_as(const struct dl_safetensors *st, int i, void *dst,
		   int to_i64, struct dl_error *err)
{
	if (i < 0 || i >= st->n)
		return dl_error_set(err, DL_ERUN, "%s: internal error: no tensor "
				    "%d", st->path, i);
	const struct dl_st_tensor *t = &st->t[i];
	int is_float = t->dtype == DL_F32 || t->dtype == DL_F64 ||
		       t->dtype == DL_F16 || t->dtype == DL_BF16;
	if (t->dtype < 0 || is_float == to_i64)
		return dl_error_set(err, DL_EINPUT, "%s: tensor '%s' has dtype %s, "
				    "expected %s", st->path, t->name,
				    t->dtype_name, to_i64 ? "an integer dtype "
				    "(I64, I32, U8)" : "a float dtype (F32, "
				    "F16, BF16, F64)");
	const unsigned char *src = st->data + t->offset;
	/* Copied in pieces of about 8 MiB, whose mapped pages are let go once
	 * copied: they would stay resident beside the copy, the weights held
	 * twice (a page shared with the next piece or tensor is read again
	 * from the page cache); in one piece, GPT-2's 154 MB embedding was
	 * resident twice while it was read. Only for a mapped file: on
	 * dl_st_open_buffer's heap bytes it would zero the pages. */
	size_t elsize = t->numel > 0 ? (size_t)t->nbytes / (size_t)t->numel : 1;
	size_t step = ((size_t)8 << 20) / (elsize ? elsize : 1);
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	for (size_t k = 0; k < (size_t)t->numel; k += step) {
		size_t cnt = (size_t)t->numel - k < step ? (size_t)t->numel - k : step;
		const unsigned char *from = src + k * elsize;
		if (to_i64)
			dl_dtype_to_i64((enum dl_dtype)t->dtype, from, cnt, (int64_t *)dst + k);
		else
			dl_dtype_to_f32((enum dl_dtype)t->dtype, from, cnt, (float *)dst + k);
		uintptr_t lo = (uintptr_t)from / page * page, hi = (uintptr_t)(from + cnt * elsize);
		if (hi > lo && st->map)
			madvise((void *)lo, hi - lo, MADV_DONTNEED);
	}
	return 0;
}

int dl_st_read_f32(const struct dl_safetensors *st, int i, float *dst,
		   struct dl_error *err)
{
	return read_as(st, i, dst, 0, err);
}

int dl_st_read_i64(const struct dl_safetensors *st, int i, int64_t *dst,
		   struct dl_error *err)
{
	return read_as(st, i, dst, 1, err);
}

const char *dl_st_meta(const struct dl_safetensors *st, const char *key)
{
	for (int i = 0; i < st->n_meta; i++)
		if (!strcmp(st->meta[2 * i], key))
			return st->meta[2 * i + 1];
	return NULL;
}

/* ---- writing ---- */

/* The header as compact JSON in argument order (jansson keeps insertion
 * order), or NULL with err set. The caller frees it. */
static char *header_json(const char *path, const struct dl_st_entry *e, int n,
			 const char *const *meta, int n_meta,
			 struct dl_error *err)
{
	json_t *root = json_object(), *m = json_object();
	char *text = NULL;
	uint64_t at = 0;
	if (!root || !m)
		goto fail;
	for (int i = 0; i < n_meta; i++)
		if (json_object_get(m, meta[2 * i]) ||
		    json_object_set_new(m, meta[2 * i], json_string(meta[2 * i + 1]))) {
			dl_error_set(err, DL_ERUN, "%s: cannot write metadata "
				     "'%s' (repeated, or not UTF-8)", path,
				     meta[2 * i]);
			goto fail;
		}
	if (n_meta > 0 && json_object_set(root, "__metadata__", m))
		goto fail;
	for (int i = 0; i < n; i++) {
		int64_t numel = dl_shape_numel(&e[i].shape);
		json_t *shape = json_array(), *t = NULL;
		for (int k = 0; shape && k < e[i].shape.ndim; k++)
			if (json_array_append_new(shape,
					json_integer(e[i].shape.d[k])))
				break;
		uint64_t end = at + (uint64_t)(numel > 0 ? numel : 0) *
					    (e[i].i64 ? 8 : 4);
		if (shape && numel >= 0)
			t = json_pack("{s:s, s:O, s:[I, I]}", "dtype",
				      e[i].i64 ? "I64" : "F32", "shape", shape,
				      "data_offsets", (json_int_t)at,
				      (json_int_t)end);
		json_decref(shape);
		if (!t || numel < 0 || !strcmp(e[i].name, "__metadata__") ||
		    json_object_get(root, e[i].name) ||
		    (numel > 0 && !e[i].f32 == !e[i].i64) ||
		    json_object_set_new(root, e[i].name, t)) {
			dl_error_set(err, DL_ERUN, "%s: cannot write tensor '%s' "
				     "(repeated name, bad shape or data, not "
				     "UTF-8, or out of memory)", path, e[i].name);
			json_decref(t);  /* a NULL t is fine */
			goto fail;
		}
		at = end;
	}
	text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
fail:
	if (!text)
		dl_error_set(err, DL_ERUN, "%s: out of memory", path);
	json_decref(m);
	json_decref(root);
	return text;
}

/* Writes count elements of esz (4 or 8) bytes as little-endian. */
static int write_le(FILE *f, const void *src, int64_t count, int esz)
{
	unsigned char buf[1 << 14];
	const unsigned char *p = src;
	int64_t per = (int64_t)sizeof buf / esz;
	for (int64_t i = 0; i < count; i += per) {
		int64_t k = count - i < per ? count - i : per;
		for (int64_t j = 0; j < k; j++) {
			uint64_t u;
			if (esz == 8) {
				memcpy(&u, p + (i + j) * 8, 8);
			} else {
				uint32_t v;
				memcpy(&v, p + (i + j) * 4, 4);
				u = v;
			}
			for (int b = 0; b < esz; b++)
				buf[j * esz + b] = (unsigned char)(u >> (8 * b));
		}
		if (fwrite(buf, (size_t)esz, (size_t)k, f) != (size_t)k)
			return -1;
	}
	return 0;
}

int dl_st_write(const char *path, const struct dl_st_entry *e, int n,
		const char *const *meta, int n_meta, struct dl_error *err)
{
	char *text = header_json(path, e, n, meta, n_meta, err);
	if (!text)
		return err && err->code ? err->code : DL_ERUN;
	size_t len = strlen(text), padded = (len + 7) / 8 * 8;
	unsigned char pre[8];
	for (int b = 0; b < 8; b++)
		pre[b] = (unsigned char)((uint64_t)padded >> (8 * b));
	struct dl_atomic a;
	int rc = dl_atomic_open(&a, path, err);
	if (rc) {
		free(text);
		return rc;
	}
	int bad = fwrite(pre, 1, 8, a.f) != 8 || fwrite(text, 1, len, a.f) != len;
	for (size_t i = len; i < padded && !bad; i++)
		bad = fputc(' ', a.f) == EOF;
	for (int i = 0; i < n && !bad; i++) {
		int64_t numel = dl_shape_numel(&e[i].shape);
		bad = e[i].i64 ? write_le(a.f, e[i].i64, numel, 8)
			       : write_le(a.f, e[i].f32, numel, 4);
	}
	free(text);
	if (bad) {
		rc = dl_error_set(err, DL_ERUN, "%s: write error: %s", path,
				  strerror(errno));
		dl_atomic_abort(&a);
		return rc;
	}
	return dl_atomic_commit(&a, err);
}
