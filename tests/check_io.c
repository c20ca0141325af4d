/* Tests of the byte-level I/O layer: .npy, .npz, safetensors, text and
 * atomic files, against files NumPy wrote (tests/data/io, made by
 * tools/gen_io_fixtures.py) and against malformed input built here. */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_suites.h"
#include "io/atomic.h"
#include "io/npy.h"
#include "io/npz.h"
#include "io/safetensors.h"
#include "io/text.h"

/* ---- helpers ---- */

static char tmpdir[64];

static void setup_tmp(void)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/dlrun-check-io-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static int count_files(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;
	while (d && (e = readdir(d)))
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

static void teardown_tmp(void)
{
	DIR *d = opendir(tmpdir);
	struct dirent *e;
	char p[512];
	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
			unlink(p);
		}
	if (d)
		closedir(d);
	rmdir(tmpdir);
}

/* Paths in a small ring of static buffers, so a test can hold a few. */
static const char *path_in(const char *dir, const char *name)
{
	static char ring[4][512];
	static int next;
	char *p = ring[next++ % 4];
	snprintf(p, sizeof ring[0], "%s/%s", dir, name);
	return p;
}

#define DATA(name) path_in(SRCDIR "/tests/data/io", name)
#define BAD(name) path_in(SRCDIR "/tests/bad", name)
#define TMP(name) path_in(tmpdir, name)

/* rc must be DL_EINPUT (or code) and the message must hold each of s1, s2. */
static void expect_error(int rc, const struct dl_error *err, int code,
			 const char *s1, const char *s2)
{
	ck_assert_msg(rc == code && err->code == code,
		      "expected code %d, got %d (%s)", code, rc, err->msg);
	ck_assert_msg(!s1 || strstr(err->msg, s1), "message '%s' lacks '%s'",
		      err->msg, s1);
	ck_assert_msg(!s2 || strstr(err->msg, s2), "message '%s' lacks '%s'",
		      err->msg, s2);
}

static unsigned char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	unsigned char *buf = malloc(1 << 16);
	*n = fread(buf, 1, 1 << 16, f);
	fclose(f);
	return buf;
}

static void spit(const char *path, const void *buf, size_t n)
{
	FILE *f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
	fclose(f);
}

/* A .npy image: magic, version major.0, the dict text (no padding
 * needed), then data bytes 0, 1, 2, ... Returns its length. */
static size_t make_npy(unsigned char *out, int major, const char *dict,
		       size_t data)
{
	size_t n = 0, h = strlen(dict) + 1;
	memcpy(out, "\x93NUMPY", 6);
	out[6] = (unsigned char)major;
	out[7] = 0;
	n = 8;
	for (int b = 0; b < (major == 1 ? 2 : 4); b++)
		out[n++] = (unsigned char)(h >> (8 * b));
	memcpy(out + n, dict, h - 1);
	n += h - 1;
	out[n++] = '\n';
	for (size_t i = 0; i < data; i++)
		out[n++] = (unsigned char)i;
	return n;
}

/* Reads the header of an in-memory .npy image; returns the result. */
static int npy_header_of(const unsigned char *buf, size_t n,
			 struct dl_npy_header *h, struct dl_error *err)
{
	FILE *f = fmemopen((void *)buf, n, "r");
	ck_assert_ptr_nonnull(f);
	int rc = dl_npy_read_header(f, "mem.npy", h, err);
	fclose(f);
	return rc;
}

static const float a23[6] = { -2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f };

static void expect_a23(const struct dl_tensor *t)
{
	ck_assert_int_eq(t->shape.ndim, 2);
	ck_assert_int_eq(t->shape.d[0], 2);
	ck_assert_int_eq(t->shape.d[1], 3);
	for (int i = 0; i < 6; i++)
		ck_assert_float_eq(t->data[i], a23[i]);
}

/* Reads path as one array with dl_npy_read and checks nothing follows. */
static struct dl_tensor read_one(const char *path)
{
	struct dl_error err = { 0 };
	struct dl_tensor t;
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	ck_assert_msg(dl_npy_read(f, path, &t, &err) == 1, "%s", err.msg);
	struct dl_tensor none;
	ck_assert_int_eq(dl_npy_read(f, path, &none, &err), 0);
	fclose(f);
	return t;
}

/* ---- .npy ---- */

START_TEST(npy_write_matches_numpy)
{
	static const struct { const char *file; int ndim; int64_t d[4]; } c[] = {
		{ "write_2x3.npy", 2, { 2, 3 } }, { "write_3.npy", 1, { 3 } },
		{ "write_0d.npy", 0, { 0 } }, { "write_0x3.npy", 2, { 0, 3 } },
		{ "write_4d.npy", 4, { 1, 2, 1, 2 } },
		{ "write_12345x0.npy", 2, { 12345, 0 } },
	};
	float vals[6] = { -2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f };
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		struct dl_error err = { 0 };
		struct dl_tensor t = { dl_shape_make(c[i].ndim, c[i].d), vals };
		if (!strcmp(c[i].file, "write_3.npy"))
			vals[0] = 1, vals[1] = 2, vals[2] = 3;
		else if (!strcmp(c[i].file, "write_0d.npy"))
			vals[0] = 3.5f;
		else if (!strcmp(c[i].file, "write_4d.npy"))
			memset(vals, 0, sizeof vals);
		else
			memcpy(vals, a23, sizeof vals);
		char *mem = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&mem, &len);
		ck_assert_int_eq(dl_npy_write(f, "mem", &t, &err), 0);
		fclose(f);
		size_t n;
		unsigned char *want = slurp(DATA(c[i].file), &n);
		ck_assert_msg(len == n && !memcmp(mem, want, n),
			      "%s: bytes differ from NumPy's", c[i].file);
		free(want);
		/* and back */
		struct dl_tensor r = read_one(DATA(c[i].file));
		ck_assert(dl_shape_equal(&r.shape, &t.shape));
		for (int64_t k = 0; k < dl_shape_numel(&r.shape); k++)
			ck_assert_float_eq(r.data[k], vals[k]);
		free(r.data);
		free(mem);
	}
}
END_TEST

START_TEST(npy_dtypes)
{
	struct dl_error err = { 0 };
	struct dl_npy_header h;
	float f[10];
	int64_t q[5];
	FILE *fp;

	struct dl_tensor t = read_one(DATA("f8.npy"));
	const float f8[6] = { 0.5f, -1.25f, 3.0f, 1e-3f, 2.5f, -7.0f };
	for (int i = 0; i < 6; i++)
		ck_assert_float_eq(t.data[i], f8[i]);
	free(t.data);

	/* floats as int64 must be whole numbers */
	fp = fopen(DATA("f8.npy"), "rb");
	ck_assert_int_eq(dl_npy_read_header(fp, "f8.npy", &h, &err), 1);
	ck_assert_int_eq(h.dtype, DL_F64);
	expect_error(dl_npy_read_i64(fp, "f8.npy", &h, 6, q, &err), &err,
		     DL_EINPUT, "f8.npy", "element 0");
	fclose(fp);

	static const struct { const char *file; int dtype; int n; int64_t v[5]; } ints[] = {
		{ "i4.npy", DL_I32, 5, { -2147483648LL, -1, 0, 1, 2147483647 } },
		{ "i8.npy", DL_I64, 4, { -(1LL << 62), -1, 0, (1LL << 40) + 1 } },
		{ "u1.npy", DL_U8, 5, { 0, 1, 127, 128, 255 } },
	};
	for (int c = 0; c < 3; c++) {
		dl_error_clear(&err);
		fp = fopen(DATA(ints[c].file), "rb");
		ck_assert_int_eq(dl_npy_read_header(fp, "x", &h, &err), 1);
		ck_assert_int_eq(h.dtype, ints[c].dtype);
		ck_assert_int_eq(h.numel, ints[c].n);
		ck_assert_int_eq(dl_npy_read_i64(fp, "x", &h, h.numel, q, &err), 0);
		for (int i = 0; i < ints[c].n; i++)
			ck_assert_int_eq(q[i], ints[c].v[i]);
		ck_assert_int_eq(dl_npy_read_header(fp, "x", &h, &err), 0);
		fclose(fp);
		t = read_one(DATA(ints[c].file));
		for (int i = 0; i < ints[c].n; i++)
			ck_assert_float_eq(t.data[i], (float)ints[c].v[i]);
		free(t.data);
	}

	/* half precision, including subnormals, infinities and NaN */
	fp = fopen(DATA("f2.npy"), "rb");
	ck_assert_int_eq(dl_npy_read_header(fp, "f2.npy", &h, &err), 1);
	ck_assert_int_eq(h.dtype, DL_F16);
	ck_assert_int_eq(dl_npy_read_f32(fp, "f2.npy", &h, 10, f, &err), 0);
	fclose(fp);
	ck_assert_float_eq(f[0], 1.0f);
	ck_assert_float_eq(f[1], -2.0f);
	ck_assert_float_eq(f[2], 65504.0f);
	ck_assert_float_eq(f[3], ldexpf(1, -24));
	ck_assert_float_eq(f[4], ldexpf(1, -14));
	ck_assert(isinf(f[5]) && f[5] > 0);
	ck_assert(isinf(f[6]) && f[6] < 0);
	ck_assert(f[7] == 0 && !signbit(f[7]));
	ck_assert(f[8] == 0 && signbit(f[8]));
	ck_assert(isnan(f[9]));
}
END_TEST

START_TEST(npy_versions_and_orders)
{
	struct dl_error err = { 0 };
	struct dl_tensor t = read_one(DATA("v2.npy"));
	expect_a23(&t);
	free(t.data);
	t = read_one(DATA("v3.npy"));
	expect_a23(&t);
	free(t.data);

	t = read_one(DATA("fortran.npy"));
	ck_assert_int_eq(t.shape.ndim, 3);
	for (int i = 0; i < 24; i++)
		ck_assert_float_eq(t.data[i], (float)i);
	free(t.data);

	struct dl_npy_header h;
	int64_t q[6];
	FILE *f = fopen(DATA("fortran_i8.npy"), "rb");
	ck_assert_int_eq(dl_npy_read_header(f, "fortran_i8.npy", &h, &err), 1);
	ck_assert(h.fortran);
	/* column-major data can only be read whole */
	expect_error(dl_npy_read_i64(f, "fortran_i8.npy", &h, 3, q, &err), &err,
		     DL_ERUN, "fortran_i8.npy", NULL);
	dl_error_clear(&err);
	ck_assert_int_eq(dl_npy_read_i64(f, "fortran_i8.npy", &h, 6, q, &err), 0);
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(q[i], i);
	fclose(f);

	/* keys in any order, double quotes, no trailing comma, Python 2 'L' */
	unsigned char buf[256];
	size_t n = make_npy(buf, 1, "{\"shape\": (2L, 3L), \"fortran_order\": "
			    "False, \"descr\": \"<f4\"}", 24);
	ck_assert_int_eq(npy_header_of(buf, n, &h, &err), 1);
	ck_assert_int_eq(h.numel, 6);
	ck_assert_int_eq(h.data_bytes, 24);
	n = make_npy(buf, 2, "{'descr':'|u1','fortran_order':True,'shape':(4,3,),}", 12);
	ck_assert_int_eq(npy_header_of(buf, n, &h, &err), 1);
	ck_assert_int_eq(h.dtype, DL_U8);
	ck_assert_int_eq(h.shape.ndim, 2);
	n = make_npy(buf, 1, "{'descr': '<u1', 'fortran_order': False, 'shape': ()}", 1);
	ck_assert_int_eq(npy_header_of(buf, n, &h, &err), 1);
	ck_assert_int_eq(h.shape.ndim, 0);
	ck_assert_int_eq(h.numel, 1);
}
END_TEST

START_TEST(npy_back_to_back)
{
	struct dl_error err = { 0 };
	struct dl_tensor t, u;
	FILE *f = tmpfile();
	t.shape = dl_shape_make(2, (int64_t[]){ 2, 3 });
	t.data = (float *)a23;
	ck_assert_int_eq(dl_npy_write(f, "tmp", &t, &err), 0);
	t.shape = dl_shape_make(0, NULL);
	ck_assert_int_eq(dl_npy_write(f, "tmp", &t, &err), 0);
	rewind(f);
	ck_assert_int_eq(dl_npy_read(f, "tmp", &u, &err), 1);
	expect_a23(&u);
	free(u.data);
	ck_assert_int_eq(dl_npy_read(f, "tmp", &u, &err), 1);
	ck_assert_int_eq(u.shape.ndim, 0);
	ck_assert_float_eq(u.data[0], -2.5f);
	free(u.data);
	ck_assert_int_eq(dl_npy_read(f, "tmp", &u, &err), 0);
	ck_assert_int_eq(dl_npy_read(f, "tmp", &u, &err), 0);
	ck_assert_int_eq(err.code, DL_OK);
	fclose(f);
}
END_TEST

/* On a non-blocking pipe, reading one byte too many fails at once: the
 * reader must take exactly one array while the writer waits. */
START_TEST(npy_pipe_reads_exactly)
{
	struct dl_error err = { 0 };
	int fd[2];
	ck_assert_int_eq(pipe(fd), 0);
	fcntl(fd[0], F_SETFL, O_NONBLOCK);
	FILE *in = fdopen(fd[0], "rb"), *out = fdopen(fd[1], "wb");
	struct dl_tensor t = { dl_shape_make(2, (int64_t[]){ 2, 3 }), (float *)a23 };
	for (int round = 0; round < 2; round++) {
		ck_assert_int_eq(dl_npy_write(out, "pipe", &t, &err), 0);
		fflush(out);
		struct dl_tensor u;
		ck_assert_msg(dl_npy_read(in, "pipe", &u, &err) == 1, "%s", err.msg);
		expect_a23(&u);
		free(u.data);
	}
	fclose(out);
	struct dl_tensor u;
	ck_assert_int_eq(dl_npy_read(in, "pipe", &u, &err), 0);
	fclose(in);
}
END_TEST

START_TEST(npy_bad_files)
{
	struct dl_error err = { 0 };
	struct dl_tensor t;
	FILE *f = fopen(BAD("bad_magic.npy"), "rb");
	expect_error(dl_npy_read(f, "bad_magic.npy", &t, &err), &err, DL_EINPUT,
		     "bad_magic.npy", "magic");
	fclose(f);
	dl_error_clear(&err);
	f = fopen(BAD("bad_dtype.npy"), "rb");
	expect_error(dl_npy_read(f, "bad_dtype.npy", &t, &err), &err, DL_EINPUT,
		     "bad_dtype.npy", "'<c8'");
	fclose(f);
	dl_error_clear(&err);
	f = fopen(BAD("truncated.npy"), "rb");
	expect_error(dl_npy_read(f, "truncated.npy", &t, &err), &err, DL_EINPUT,
		     "truncated.npy", "expected 24 bytes, got 10");
	fclose(f);

	/* a truncated header, at every length short of the data */
	size_t n;
	unsigned char *good = slurp(DATA("write_2x3.npy"), &n);
	for (size_t cut = 1; cut < 128; cut++) {
		struct dl_npy_header h;
		dl_error_clear(&err);
		expect_error(npy_header_of(good, cut, &h, &err), &err, DL_EINPUT,
			     "mem.npy", "truncated .npy header");
	}
	free(good);
}
END_TEST

START_TEST(npy_bad_headers)
{
	static const struct { int major; const char *dict, *want; } c[] = {
		{ 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }",
		  "big-endian dtype '>f4'" },
		{ 1, "{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }",
		  "unsupported .npy dtype '<c8'" },
		{ 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,)}",
		  "structured" },
		{ 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 2), }",
		  "too many elements" },
		{ 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }",
		  "dimension too large" },
		{ 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }",
		  "non-negative" },
		{ 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3), }",
		  "trailing comma" },
		{ 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }",
		  "more than 8" },
		{ 1, "{'descr': '<f4', 'fortran_order': False}", "missing key 'shape'" },
		{ 1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}", "True or False" },
		{ 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}",
		  "unexpected key 'x'" },
		{ 1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}",
		  "appears twice" },
		{ 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} junk",
		  "after the dict" },
		{ 1, "{'descr': '<f4 'fortran_order': False, 'shape': (3,)}",
		  "malformed" },
		{ 1, "", "malformed" },
		{ 4, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
		  "version 4.0" },
	};
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		struct dl_error err = { 0 };
		struct dl_npy_header h;
		unsigned char buf[512];
		size_t n = make_npy(buf, c[i].major, c[i].dict, 12);
		expect_error(npy_header_of(buf, n, &h, &err), &err, DL_EINPUT,
			     "mem.npy", c[i].want);
	}

	/* header lengths that the stream does not hold, or too large */
	unsigned char buf[64];
	struct dl_error err = { 0 };
	struct dl_npy_header h;
	size_t n = make_npy(buf, 1, "{}", 0);
	buf[8] = 0xff, buf[9] = 0xff;
	expect_error(npy_header_of(buf, n, &h, &err), &err, DL_EINPUT,
		     "mem.npy", "expected 65535 bytes, got 3");
	dl_error_clear(&err);
	n = make_npy(buf, 2, "{}", 0);
	buf[11] = 0x7f;
	expect_error(npy_header_of(buf, n, &h, &err), &err, DL_EINPUT,
		     "mem.npy", "out of range");
	dl_error_clear(&err);
	buf[1] = 'X';
	expect_error(npy_header_of(buf, n, &h, &err), &err, DL_EINPUT,
		     "mem.npy", "magic");
	/* nothing at all is a clean end */
	dl_error_clear(&err);
	ck_assert_int_eq(npy_header_of(buf, 0, &h, &err), 0);
}
END_TEST

/* ---- .npz ---- */

START_TEST(npz_members)
{
	const char *files[] = { "stored.npz", "deflated.npz", "zip64.npz" };
	for (int i = 0; i < 3; i++) {
		struct dl_error err = { 0 };
		struct dl_npz z;
		ck_assert_msg(dl_npz_open(&z, DATA(files[i]), &err) == 0, "%s",
			      err.msg);
		ck_assert_int_eq(z.n, 2);
		ck_assert_int_eq(z.m[0].method, i ? 8 : 0);
		FILE *f = dl_npz_member(&z, "x", &err);
		ck_assert_msg(f != NULL, "%s", err.msg);
		struct dl_tensor t;
		ck_assert_int_eq(dl_npy_read(f, "x", &t, &err), 1);
		expect_a23(&t);
		free(t.data);
		ck_assert_int_eq(dl_npy_read(f, "x", &t, &err), 0);
		fclose(f);
		f = dl_npz_member(&z, "y", &err);
		struct dl_npy_header h;
		int64_t y[4];
		ck_assert_int_eq(dl_npy_read_header(f, "y", &h, &err), 1);
		ck_assert_int_eq(dl_npy_read_i64(f, "y", &h, 4, y, &err), 0);
		ck_assert(y[0] == 3 && y[1] == 1 && y[2] == 4 && y[3] == 1);
		fclose(f);
		ck_assert_ptr_null(dl_npz_member(&z, "z", &err));
		expect_error(err.code, &err, DL_EINPUT, files[i], "no array 'z'");
		dl_npz_close(&z);
		dl_npz_close(&z);
	}
}
END_TEST

START_TEST(npz_bad)
{
	struct dl_error err = { 0 };
	struct dl_npz z;
	size_t n;
	unsigned char *buf = slurp(DATA("deflated.npz"), &n);
	/* cut anywhere: either no directory, or it points past the end */
	for (size_t cut = 0; cut < n; cut += 7) {
		dl_error_clear(&err);
		spit(TMP("cut.npz"), buf, cut);
		expect_error(dl_npz_open(&z, TMP("cut.npz"), &err), &err,
			     DL_EINPUT, "cut.npz", NULL);
	}
	free(buf);
	/* a flipped byte in a stored member's data fails its CRC */
	buf = slurp(DATA("stored.npz"), &n);
	buf[200] ^= 1;
	spit(TMP("crc.npz"), buf, n);
	dl_error_clear(&err);
	ck_assert_int_eq(dl_npz_open(&z, TMP("crc.npz"), &err), 0);
	FILE *f1 = dl_npz_member(&z, "x", &err), *f2 = dl_npz_member(&z, "y", &err);
	ck_assert(!f1 || !f2);
	expect_error(err.code, &err, DL_EINPUT, "crc.npz", "CRC");
	if (f1)
		fclose(f1);
	if (f2)
		fclose(f2);
	dl_npz_close(&z);
	free(buf);
	dl_error_clear(&err);
	expect_error(dl_npz_open(&z, TMP("absent.npz"), &err), &err, DL_EINPUT,
		     "absent.npz", NULL);
}
END_TEST

/* ---- safetensors ---- */

/* A safetensors file from header text and datalen bytes of data. */
static void write_st(const char *path, const char *json, size_t datalen)
{
	unsigned char buf[4096];
	size_t n = strlen(json);
	for (int b = 0; b < 8; b++)
		buf[b] = (unsigned char)((uint64_t)n >> (8 * b));
	memcpy(buf + 8, json, n);
	memset(buf + 8 + n, 0, datalen);
	spit(path, buf, 8 + n + datalen);
}

START_TEST(st_roundtrip)
{
	struct dl_error err = { 0 };
	const float w[6] = { 1, -2, 3.5f, 1e-20f, -0.0f, 6 };
	const int64_t step[2] = { 42, -(1LL << 50) };
	const float s = 7;
	struct dl_st_entry e[] = {
		{ "3.weight", dl_shape_make(2, (int64_t[]){ 2, 3 }), w, NULL },
		{ "step", dl_shape_make(1, (int64_t[]){ 2 }), NULL, step },
		{ "a_scalar", dl_shape_make(0, NULL), &s, NULL },
		{ "empty", dl_shape_make(2, (int64_t[]){ 0, 4 }), NULL, NULL },
	};
	const char *meta[] = { "format", "pt", "epoch", "3" };
	ck_assert_int_eq(dl_st_write(TMP("w.safetensors"), e, 4, meta, 2, &err), 0);
	ck_assert_int_eq(count_files(tmpdir), 1);  /* no temporary left */

	size_t n;
	unsigned char *b = slurp(TMP("w.safetensors"), &n);
	const char *want = "{\"__metadata__\":{\"format\":\"pt\",\"epoch\":\"3\"},"
		"\"3.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
		"\"step\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[24,40]},"
		"\"a_scalar\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[40,44]},"
		"\"empty\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[44,44]}}";
	size_t hl = b[0] | (size_t)b[1] << 8;
	ck_assert_int_eq(hl % 8, 0);
	ck_assert(!memcmp(b + 8, want, strlen(want)));
	for (size_t i = strlen(want); i < hl; i++)
		ck_assert_int_eq(b[8 + i], ' ');
	ck_assert_uint_eq(n, 8 + hl + 44);

	/* the same arguments give the same bytes */
	ck_assert_int_eq(dl_st_write(TMP("w2.safetensors"), e, 4, meta, 2, &err), 0);
	size_t n2;
	unsigned char *b2 = slurp(TMP("w2.safetensors"), &n2);
	ck_assert(n == n2 && !memcmp(b, b2, n));
	free(b);
	free(b2);

	struct dl_safetensors st;
	ck_assert_msg(dl_st_open(&st, TMP("w.safetensors"), &err) == 0, "%s", err.msg);
	ck_assert_int_eq(st.n, 4);
	ck_assert_str_eq(dl_st_meta(&st, "format"), "pt");
	ck_assert_str_eq(dl_st_meta(&st, "epoch"), "3");
	ck_assert_ptr_null(dl_st_meta(&st, "nope"));
	int i = dl_st_find(&st, "3.weight");
	ck_assert_int_ge(i, 0);
	ck_assert(dl_shape_equal(&st.t[i].shape, &e[0].shape));
	float got[6];
	ck_assert_int_eq(dl_st_read_f32(&st, i, got, &err), 0);
	ck_assert(!memcmp(got, w, sizeof w));
	int64_t q[2];
	i = dl_st_find(&st, "step");
	ck_assert_int_eq(dl_st_read_i64(&st, i, q, &err), 0);
	ck_assert(q[0] == 42 && q[1] == -(1LL << 50));
	expect_error(dl_st_read_f32(&st, i, got, &err), &err, DL_EINPUT,
		     "w.safetensors", "tensor 'step' has dtype I64");
	i = dl_st_find(&st, "a_scalar");
	ck_assert_int_eq(st.t[i].numel, 1);
	ck_assert_int_eq(dl_st_find(&st, "empty") >= 0, 1);
	ck_assert_int_eq(dl_st_find(&st, "missing"), -1);
	dl_st_close(&st);
	dl_st_close(&st);

	/* an existing file is replaced whole */
	ck_assert_int_eq(dl_st_write(TMP("w.safetensors"), e, 1, NULL, 0, &err), 0);
	ck_assert_int_eq(dl_st_open(&st, TMP("w.safetensors"), &err), 0);
	ck_assert_int_eq(st.n, 1);
	ck_assert_int_eq(st.n_meta, 0);
	dl_st_close(&st);
	ck_assert_int_eq(count_files(tmpdir), 2);
}
END_TEST

START_TEST(st_dtypes)
{
	struct dl_error err = { 0 };
	struct dl_safetensors st;
	ck_assert_msg(dl_st_open(&st, DATA("dtypes.safetensors"), &err) == 0,
		      "%s", err.msg);
	ck_assert_int_eq(st.n, 7);
	ck_assert_str_eq(dl_st_meta(&st, "note"), "dtypes");
	float f[6];
	int i = dl_st_find(&st, "f16");
	ck_assert_int_eq(st.t[i].dtype, DL_F16);
	ck_assert_int_eq(dl_st_read_f32(&st, i, f, &err), 0);
	ck_assert_float_eq(f[0], 1.0f);
	ck_assert_float_eq(f[1], -2.0f);
	ck_assert_float_eq(f[2], 65504.0f);
	ck_assert_float_eq(f[3], ldexpf(1, -24));
	ck_assert(isinf(f[4]) && f[4] > 0);
	ck_assert(isnan(f[5]));
	i = dl_st_find(&st, "bf16");
	ck_assert_int_eq(dl_st_read_f32(&st, i, f, &err), 0);
	ck_assert_float_eq(f[0], 1.0f);
	ck_assert_float_eq(f[1], -3.00405527e38f);  /* -3e38 rounded to bf16 */
	ck_assert_float_eq(f[2], 0.10009765625f);
	i = dl_st_find(&st, "f64");
	ck_assert_int_eq(dl_st_read_f32(&st, i, f, &err), 0);
	ck_assert_float_eq(f[0], 0.1f);
	ck_assert(isinf(f[1]) && f[1] < 0);
	int64_t q[2];
	i = dl_st_find(&st, "i32");
	ck_assert_int_eq(dl_st_read_i64(&st, i, q, &err), 0);
	ck_assert(q[0] == -7 && q[1] == 9);
	i = dl_st_find(&st, "flags");
	ck_assert_int_eq(st.t[i].dtype, -1);
	ck_assert_str_eq(st.t[i].dtype_name, "BOOL");
	expect_error(dl_st_read_f32(&st, i, f, &err), &err, DL_EINPUT,
		     "dtypes.safetensors", "tensor 'flags' has dtype BOOL");
	i = dl_st_find(&st, "scalar");
	ck_assert_int_eq(dl_st_read_f32(&st, i, f, &err), 0);
	ck_assert_float_eq(f[0], 2.5f);
	ck_assert_int_eq(st.t[dl_st_find(&st, "empty")].nbytes, 0);
	dl_st_close(&st);
}
END_TEST

START_TEST(st_bad)
{
	static const struct { const char *json; size_t data; const char *want; } c[] = {
		{ "{\"3.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,12]}}",
		  12, "tensor '3.weight': data_offsets [0, 12] hold 12 bytes, shape [2, 3] F32 needs 24" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		  "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
		  12, "bytes [4, 8) of the data buffer belong to no tensor (before tensor 'b')" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
		  8, "bytes [0, 4)" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
		  8, "data buffer has 8 bytes but the tensors end at 4" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		  "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
		  8, "duplicate" },
		{ "{\"__metadata__\":{\"epoch\":3}}", 0, "__metadata__ 'epoch'" },
		{ "{\"__metadata__\":[\"x\"]}", 0, "__metadata__ must be an object" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}",
		  4, "not valid JSON" },
		{ "[1, 2]", 0, "not a JSON object" },
		{ "{\"a\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,4]}}",
		  4, "tensor 'a': unknown dtype 'Q7'" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
		  4, "tensor 'a': shape entries" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}",
		  4, "tensor 'a': shape entries" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776,2],\"data_offsets\":[0,4]}}",
		  4, "too many elements" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}",
		  4, "tensor 'a': data_offsets must be" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}",
		  4, "tensor 'a': data_offsets must be" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "tensor 'a': expected" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
		  8, "reach past the 8-byte data buffer" },
		{ "{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,1]}}",
		  1, "whole number of bytes" },
		{ "{\"\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
		  4, "not valid JSON" },
	};
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		struct dl_error err = { 0 };
		struct dl_safetensors st;
		write_st(TMP("w.safetensors"), c[i].json, c[i].data);
		expect_error(dl_st_open(&st, TMP("w.safetensors"), &err), &err,
			     DL_EINPUT, "w.safetensors", c[i].want);
		dl_st_close(&st);
	}

	/* sizes in the 8-byte prefix */
	static const struct { const char *file; const char *want; } f[] = {
		{ "truncated.safetensors", "reach past the" },
		{ "header_beyond.safetensors", "header length 1000 reaches past" },
		{ "overlap.safetensors", "tensor 'b': data_offsets [8, 24] overlap tensor 'a'" },
	};
	for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
		struct dl_error err = { 0 };
		struct dl_safetensors st;
		expect_error(dl_st_open(&st, BAD(f[i].file), &err), &err,
			     DL_EINPUT, f[i].file, f[i].want);
	}
	struct dl_error err = { 0 };
	struct dl_safetensors st;
	unsigned char big[16] = { 0, 0xe1, 0xf5, 0x05, 0, 0, 0, 0 };  /* 1e8 */
	spit(TMP("big.safetensors"), big, 16);
	expect_error(dl_st_open(&st, TMP("big.safetensors"), &err), &err,
		     DL_EINPUT, "big.safetensors", "reaches past");
	dl_error_clear(&err);
	big[0] = 1;
	spit(TMP("big.safetensors"), big, 16);
	expect_error(dl_st_open(&st, TMP("big.safetensors"), &err), &err,
		     DL_EINPUT, "big.safetensors", "100000000-byte limit");
	memset(big, 0xff, 8);
	spit(TMP("big.safetensors"), big, 16);
	dl_error_clear(&err);
	expect_error(dl_st_open(&st, TMP("big.safetensors"), &err), &err,
		     DL_EINPUT, "big.safetensors", "limit");
	spit(TMP("short.safetensors"), big, 5);
	dl_error_clear(&err);
	expect_error(dl_st_open(&st, TMP("short.safetensors"), &err), &err,
		     DL_EINPUT, "short.safetensors", "too short");
	dl_error_clear(&err);
	expect_error(dl_st_open(&st, TMP("absent.safetensors"), &err), &err,
		     DL_EINPUT, "absent.safetensors", "cannot open");
}
END_TEST

/* ---- text ---- */

START_TEST(text_rows)
{
	const char *in = "# x y z\n1, 2 3\n\n4\t5,6   # tail comment\n  \n"
			 "7 nan -inf\n8 9\n";
	FILE *f = fmemopen((void *)in, strlen(in), "r");
	struct dl_text_reader r;
	struct dl_error err = { 0 };
	dl_text_reader_init(&r, f, "in.txt");
	float dst[2 * 4];
	int64_t width = 0;
	ck_assert_int_eq(dl_text_read_rows(&r, &width, 4, dst, 2, &err), 2);
	ck_assert_int_eq(width, 3);
	for (int i = 0; i < 6; i++)
		ck_assert_float_eq(dst[i], (float)(i + 1));
	ck_assert_int_eq(r.line, 4);  /* nothing read beyond the rows asked for */
	ck_assert_int_eq(dl_text_read_rows(&r, &width, 4, dst, 1, &err), 1);
	ck_assert(dst[0] == 7 && isnan(dst[1]) && isinf(dst[2]) && dst[2] < 0);
	expect_error((int)dl_text_read_rows(&r, &width, 4, dst, 2, &err), &err,
		     DL_EINPUT, "in.txt:7: row has 2 values, expected 3", NULL);
	dl_text_reader_free(&r);
	fclose(f);

	const char *bad[][2] = {
		{ "1 2\n3 4 5\n", "in.txt:2: row has 3 values, the row on line 1 has 2" },
		{ "1 2x 3\n", "in.txt:1:3: '2x' is not a number" },
		{ "1 1e999\n", "in.txt:1:3: 1e999 is beyond the float32 range" },
		{ "1 1e39\n", "in.txt:1:3: 1e39 is beyond the float32 range" },
		{ "1 2 3 4 5\n", "in.txt:1: row has 5 values, more than the 4" },
	};
	for (int i = 0; i < 5; i++) {
		dl_error_clear(&err);
		f = fmemopen((void *)bad[i][0], strlen(bad[i][0]), "r");
		dl_text_reader_init(&r, f, "in.txt");
		width = 0;
		int64_t rc = dl_text_read_rows(&r, &width, 4, dst, 2, &err);
		expect_error((int)rc, &err, DL_EINPUT, bad[i][1], NULL);
		dl_text_reader_free(&r);
		fclose(f);
	}
}
END_TEST

START_TEST(text_roundtrip)
{
	const float src[6] = { 0.1f, -3.4028235e38f, 1e-45f, 123456789.0f,
			       -0.0f, 1.0f / 3 };
	struct dl_error err = { 0 };
	FILE *f = tmpfile();
	ck_assert_int_eq(dl_text_write_rows(f, "out", src, 2, 3, &err), 0);
	rewind(f);
	char line[256];
	ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
	ck_assert_str_eq(line, "0.100000001 -3.40282347e+38 1.40129846e-45\n");
	rewind(f);
	struct dl_text_reader r;
	dl_text_reader_init(&r, f, "out");
	float back[6];
	int64_t width = 3;
	ck_assert_int_eq(dl_text_read_rows(&r, &width, 3, back, 5, &err), 2);
	ck_assert(!memcmp(back, src, sizeof src));
	ck_assert_int_eq(dl_text_read_rows(&r, &width, 3, back, 5, &err), 0);
	dl_text_reader_free(&r);
	fclose(f);
}
END_TEST

/* ---- atomic ---- */

START_TEST(atomic_files)
{
	struct dl_error err = { 0 };
	struct dl_atomic a;
	spit(TMP("out.txt"), "old", 3);
	ck_assert_int_eq(dl_atomic_open(&a, TMP("out.txt"), &err), 0);
	fputs("new!", a.f);
	ck_assert_int_eq(count_files(tmpdir), 2);
	dl_atomic_abort(&a);
	dl_atomic_abort(&a);
	ck_assert_int_eq(count_files(tmpdir), 1);
	size_t n;
	unsigned char *b = slurp(TMP("out.txt"), &n);
	ck_assert(n == 3 && !memcmp(b, "old", 3));
	free(b);
	ck_assert_int_eq(dl_atomic_open(&a, TMP("out.txt"), &err), 0);
	fputs("new!", a.f);
	ck_assert_int_eq(dl_atomic_commit(&a, &err), 0);
	dl_atomic_abort(&a);
	b = slurp(TMP("out.txt"), &n);
	ck_assert(n == 4 && !memcmp(b, "new!", 4));
	free(b);
	ck_assert_int_eq(count_files(tmpdir), 1);
	expect_error(dl_atomic_open(&a, TMP("no/such/dir.txt"), &err), &err,
		     DL_EINPUT, "no/such/dir.txt", NULL);
	dl_atomic_abort(&a);
}
END_TEST

Suite *make_io_suite(void)
{
	Suite *s = suite_create("io");
	TCase *npy = tcase_create("npy");
	tcase_add_test(npy, npy_write_matches_numpy);
	tcase_add_test(npy, npy_dtypes);
	tcase_add_test(npy, npy_versions_and_orders);
	tcase_add_test(npy, npy_back_to_back);
	tcase_add_test(npy, npy_pipe_reads_exactly);
	tcase_add_test(npy, npy_bad_files);
	tcase_add_test(npy, npy_bad_headers);
	suite_add_tcase(s, npy);
	TCase *files = tcase_create("files");
	tcase_add_checked_fixture(files, setup_tmp, teardown_tmp);
	tcase_add_test(files, npz_members);
	tcase_add_test(files, npz_bad);
	tcase_add_test(files, st_roundtrip);
	tcase_add_test(files, st_dtypes);
	tcase_add_test(files, st_bad);
	tcase_add_test(files, atomic_files);
	suite_add_tcase(s, files);
	TCase *text = tcase_create("text");
	tcase_add_test(text, text_rows);
	tcase_add_test(text, text_roundtrip);
	suite_add_tcase(s, text);
	return s;
}
