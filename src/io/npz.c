/* .npz archives: the zip central directory (with zip64 fields, which NumPy
 * forces) is read and checked against the file size once at open; a member
 * is then copied or inflated, CRC-checked, into a temporary stream. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "io/npz.h"

#define EOCD_SIZE 22
#define EOCD_MAX (EOCD_SIZE + 65535)   /* record plus the longest comment */
#define CDIR_SIZE 46
#define LOCAL_SIZE 30
#define NPZ_MEMORY_MEMBER (1 << 20)   /* members up to this size in memory */

static uint64_t le(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static int bad(struct dl_npz *z, const char *what, struct dl_error *err)
{
	return dl_error_set(err, DL_EINPUT, "%s: not a valid .npz (zip) file: %s",
			    z->path, what);
}

/* Reads n bytes at offset off, which the caller checked against the size. */
static int read_at(struct dl_npz *z, uint64_t off, void *buf, size_t n,
		   struct dl_error *err)
{
	if (fseeko(z->f, (off_t)off, SEEK_SET) != 0 || fread(buf, 1, n, z->f) != n)
		return dl_error_set(err, DL_ERUN, "%s: read error: %s", z->path,
				    ferror(z->f) ? strerror(errno) :
				    "unexpected end of file");
	return 0;
}

/* Finds the end of central directory: entry count, directory offset and
 * size, replaced by the zip64 record's when a locator precedes it. */
static int find_directory(struct dl_npz *z, uint64_t size, uint64_t *count,
			  uint64_t *cd_off, uint64_t *cd_size,
			  struct dl_error *err)
{
	if (size < EOCD_SIZE)
		return bad(z, "too short", err);
	size_t len = size < EOCD_MAX ? (size_t)size : EOCD_MAX;
	unsigned char *tail = malloc(len);
	if (!tail)
		return dl_error_set(err, DL_ERUN, "%s: out of memory", z->path);
	int rc = read_at(z, size - len, tail, len, err);
	long at = -1;
	for (long i = (long)(len - EOCD_SIZE); !rc && i >= 0; i--)
		if (le(tail + i, 4) == 0x06054b50 &&
		    (size_t)i + EOCD_SIZE + le(tail + i + 20, 2) <= len) {
			at = i;
			break;
		}
	if (!rc && at < 0)
		rc = bad(z, "no end of central directory record", err);
	if (!rc) {
		const unsigned char *e = tail + at;
		if (le(e + 4, 2) != 0 || le(e + 6, 2) != 0)
			rc = bad(z, "multi-disk archives are not supported", err);
		*count = le(e + 10, 2);
		*cd_size = le(e + 12, 4);
		*cd_off = le(e + 16, 4);
	}
	uint64_t eocd = size - len + (uint64_t)at;
	if (!rc && at >= 20 && le(tail + at - 20, 4) == 0x07064b50) {
		unsigned char r[56];
		uint64_t off = le(tail + at - 20 + 8, 8);
		if (off > eocd - 20 || eocd - 20 - off < sizeof r)
			rc = bad(z, "zip64 end record out of range", err);
		else if (!(rc = read_at(z, off, r, sizeof r, err))) {
			if (le(r, 4) != 0x06064b50)
				rc = bad(z, "bad zip64 end record", err);
			*count = le(r + 32, 8);
			*cd_size = le(r + 40, 8);
			*cd_off = le(r + 48, 8);
			eocd = off;
		}
	}
	free(tail);
	if (!rc && (*cd_off > eocd || *cd_size > eocd - *cd_off ||
		    *count > *cd_size / CDIR_SIZE))
		rc = bad(z, "central directory out of range", err);
	return rc;
}

/* The zip64 extra field holds, in this order, those of usize, csize and
 * offset whose 32-bit fields are 0xffffffff. */
static int zip64_extra(struct dl_npz *z, const unsigned char *x, size_t n,
		       struct dl_npz_member *m, struct dl_error *err)
{
	while (n >= 4) {
		size_t id = (size_t)le(x, 2), sz = (size_t)le(x + 2, 2);
		if (sz > n - 4)
			return bad(z, "extra field out of range", err);
		if (id == 1) {
			unsigned long long *f[3] = { &m->usize, &m->csize,
						     &m->offset };
			size_t at = 4;
			for (int k = 0; k < 3; k++) {
				if (*f[k] != 0xffffffffULL)
					continue;
				if (at + 8 > 4 + sz)
					return bad(z, "short zip64 extra field",
						   err);
				*f[k] = le(x + at, 8);
				at += 8;
			}
		}
		x += 4 + sz;
		n -= 4 + sz;
	}
	return 0;
}

/* Parses central directory entry p (room bytes left) into m and finds its
 * data through the local header; returns the entry's length or an error. */
static long parse_entry(struct dl_npz *z, const unsigned char *p, size_t room,
			uint64_t size, struct dl_npz_member *m,
			struct dl_error *err)
{
	if (room < CDIR_SIZE || le(p, 4) != 0x02014b50)
		return bad(z, "bad central directory entry", err);
	size_t nlen = (size_t)le(p + 28, 2), xlen = (size_t)le(p + 30, 2);
	size_t clen = (size_t)le(p + 32, 2);
	if (CDIR_SIZE + nlen + xlen + clen > room)
		return bad(z, "central directory entry out of range", err);
	const char *name = (const char *)p + CDIR_SIZE;
	if (nlen == 0 || memchr(name, '\0', nlen))
		return bad(z, "bad member name", err);
	size_t keep = nlen >= 4 && !memcmp(name + nlen - 4, ".npy", 4) ?
		      nlen - 4 : nlen;
	if (!(m->name = malloc(keep + 1)))
		return dl_error_set(err, DL_ERUN, "%s: out of memory", z->path);
	memcpy(m->name, name, keep);
	m->name[keep] = '\0';
	int flags = (int)le(p + 8, 2);
	m->method = (int)le(p + 10, 2);
	m->crc = (unsigned long)le(p + 16, 4);
	m->csize = le(p + 20, 4);
	m->usize = le(p + 24, 4);
	m->offset = le(p + 42, 4);  /* the local header, for now */
	int rc = zip64_extra(z, p + CDIR_SIZE + nlen, xlen, m, err);
	if (rc)
		return rc;
	if (flags & 1)
		return dl_error_set(err, DL_EINPUT, "%s: member '%s' is encrypted",
				    z->path, m->name);
	if (m->method != 0 && m->method != 8)
		return dl_error_set(err, DL_EINPUT, "%s: member '%s' uses zip "
				    "compression method %d (only stored and "
				    "deflated are supported)", z->path, m->name,
				    m->method);
	if (m->method == 0 && m->csize != m->usize)
		return bad(z, "stored member with two different sizes", err);
	unsigned char lh[LOCAL_SIZE];
	if (m->offset > size || size - m->offset < LOCAL_SIZE)
		return bad(z, "local header out of range", err);
	if ((rc = read_at(z, m->offset, lh, LOCAL_SIZE, err)))
		return rc;
	if (le(lh, 4) != 0x04034b50)
		return bad(z, "bad local header", err);
	m->offset += LOCAL_SIZE + le(lh + 26, 2) + le(lh + 28, 2);
	if (m->offset > size || m->csize > size - m->offset)
		return dl_error_set(err, DL_EINPUT, "%s: member '%s' reaches past "
				    "the end of the file (truncated?)", z->path,
				    m->name);
	return (long)(CDIR_SIZE + nlen + xlen + clen);
}

/* Reads the central directory of the size-byte archive z->f. Closes z on
 * error. */
static int read_index(struct dl_npz *z, uint64_t size, struct dl_error *err)
{
	const char *path = z->path;
	uint64_t count = 0, cd_off = 0, cd_size = 0;
	unsigned char *cd = NULL;
	int rc;
	if (!(rc = find_directory(z, size, &count, &cd_off, &cd_size, err))) {
		cd = malloc(cd_size ? (size_t)cd_size : 1);
		z->m = calloc(count ? (size_t)count : 1, sizeof *z->m);
		if (!cd || !z->m)
			rc = dl_error_set(err, DL_ERUN, "%s: out of memory", path);
		else
			rc = read_at(z, cd_off, cd, (size_t)cd_size, err);
	}
	size_t at = 0;
	for (uint64_t i = 0; !rc && i < count; i++) {
		long n = parse_entry(z, cd + at, (size_t)cd_size - at, size,
				     &z->m[z->n++], err);
		if (n < 0)
			rc = (int)n;
		else
			at += (size_t)n;
		for (int j = 0; !rc && j < z->n - 1; j++)
			if (!strcmp(z->m[j].name, z->m[z->n - 1].name))
				rc = dl_error_set(err, DL_EINPUT, "%s: member '%s' "
						  "appears twice", path,
						  z->m[j].name);
	}
	free(cd);
	if (rc)
		dl_npz_close(z);
	return rc;
}

int dl_npz_open(struct dl_npz *z, const char *path, struct dl_error *err)
{
	memset(z, 0, sizeof *z);
	if (!(z->path = strdup(path)))
		return dl_error_set(err, DL_ERUN, "%s: out of memory", path);
	struct stat sb;
	int rc;
	if (!(z->f = fopen(path, "rb")))
		rc = dl_error_set(err, DL_EINPUT, "%s: cannot open: %s", path,
				  strerror(errno));
	else if (fstat(fileno(z->f), &sb) != 0 || !S_ISREG(sb.st_mode))
		rc = dl_error_set(err, DL_EINPUT, "%s: not a regular file", path);
	else
		return read_index(z, (uint64_t)sb.st_size, err);
	dl_npz_close(z);
	return rc;
}

int dl_npz_open_buffer(struct dl_npz *z, const char *path, const void *buf,
		       size_t size, struct dl_error *err)
{
	static char empty[1];
	memset(z, 0, sizeof *z);
	if (!(z->path = strdup(path)) ||
	    !(z->f = fmemopen(size ? (void *)buf : empty, size ? size : 1, "rb"))) {
		dl_npz_close(z);
		return dl_error_set(err, DL_ERUN, "%s: out of memory", path);
	}
	return read_index(z, size, err);
}

void dl_npz_close(struct dl_npz *z)
{
	if (!z)
		return;
	if (z->f)
		fclose(z->f);
	for (int i = 0; i < z->n; i++)
		free(z->m[i].name);
	free(z->m);
	free(z->path);
	memset(z, 0, sizeof *z);
}

/* Copies (stored) or inflates (deflated) member m into out, checking the
 * size and CRC the directory promises. */
static int extract(struct dl_npz *z, const struct dl_npz_member *m, FILE *out,
		   struct dl_error *err)
{
	unsigned char in[1 << 15], buf[1 << 15];
	z_stream zs;
	memset(&zs, 0, sizeof zs);
	if (m->method == 8 && inflateInit2(&zs, -MAX_WBITS) != Z_OK)
		return dl_error_set(err, DL_ERUN, "%s: zlib init failed", z->path);
	uLong crc = crc32(0L, Z_NULL, 0);
	unsigned long long left = m->csize, made = 0;
	int rc = 0, zr = Z_OK;
	if (fseeko(z->f, (off_t)m->offset, SEEK_SET) != 0)
		rc = dl_error_set(err, DL_ERUN, "%s: %s", z->path, strerror(errno));
	while (!rc && (left > 0 || (m->method == 8 && zr != Z_STREAM_END))) {
		size_t k = left < sizeof in ? (size_t)left : sizeof in;
		if (k == 0) {   /* input used up, stream not ended */
			rc = dl_error_set(err, DL_EINPUT, "%s: member '%s': "
					  "deflate data ends early", z->path,
					  m->name);
			break;
		}
		if (fread(in, 1, k, z->f) != k) {
			rc = dl_error_set(err, DL_ERUN, "%s: read error", z->path);
			break;
		}
		left -= k;
		zs.next_in = in;
		zs.avail_in = (uInt)k;
		do {
			const unsigned char *chunk = in;
			size_t got = k;
			if (m->method == 8) {
				zs.next_out = buf;
				zs.avail_out = sizeof buf;
				zr = inflate(&zs, Z_NO_FLUSH);
				if (zr != Z_OK && zr != Z_STREAM_END &&
				    zr != Z_BUF_ERROR) {
					rc = dl_error_set(err, DL_EINPUT, "%s: member "
							  "'%s': corrupt deflate "
							  "data (%s)", z->path,
							  m->name, zs.msg ?
							  zs.msg : "zlib error");
					break;
				}
				chunk = buf;
				got = sizeof buf - zs.avail_out;
			}
			made += got;
			if (made > m->usize) {
				rc = dl_error_set(err, DL_EINPUT, "%s: member '%s' "
						  "is longer than its %llu bytes",
						  z->path, m->name, m->usize);
				break;
			}
			crc = crc32(crc, chunk, (uInt)got);
			if (got && fwrite(chunk, 1, got, out) != got) {
				rc = dl_error_set(err, DL_ERUN, "%s: cannot write "
						  "a temporary file: %s", z->path,
						  strerror(errno));
				break;
			}
		} while (m->method == 8 && zr != Z_STREAM_END &&
			 (zs.avail_in > 0 || zs.avail_out == 0));
	}
	if (m->method == 8)
		inflateEnd(&zs);
	if (!rc && (made != m->usize || crc != m->crc))
		rc = dl_error_set(err, DL_EINPUT, "%s: member '%s' is corrupt "
				  "(%s mismatch)", z->path, m->name,
				  made != m->usize ? "size" : "CRC");
	return rc;
}

FILE *dl_npz_member(struct dl_npz *z, const char *name, struct dl_error *err)
{
	const struct dl_npz_member *m = NULL;
	for (int i = 0; i < z->n && !m; i++)
		if (!strcmp(z->m[i].name, name))
			m = &z->m[i];
	if (!m) {
		char list[512] = "";
		size_t used = 0;
		for (int i = 0; i < z->n && used < sizeof list; i++)
			used += (size_t)snprintf(list + used, sizeof list - used,
						 "%s'%s'", i ? ", " : "",
						 z->m[i].name);
		dl_error_set(err, DL_EINPUT, "%s: no array '%s' (it holds %s)",
			     z->path, name, z->n ? list : "none");
		return NULL;
	}
	/* a small member in memory, a larger one in a temporary file (glibc's
	 * fmemopen() writes a NUL after the data: one byte more, or it
	 * overwrites the last) */
	FILE *out = m->usize <= NPZ_MEMORY_MEMBER
		? fmemopen(NULL, (size_t)m->usize + 1, "w+") : tmpfile();
	if (!out) {
		dl_error_set(err, DL_ERUN, "%s: cannot create a temporary file: %s",
			     z->path, strerror(errno));
		return NULL;
	}
	if (extract(z, m, out, err) || fflush(out) != 0 || fseek(out, 0, SEEK_SET)) {
		dl_error_set(err, DL_ERUN, "%s: temporary file: %s", z->path,
			     strerror(errno));
		fclose(out);
		return NULL;
	}
	return out;
}
