/* File kinds by magic bytes (io/sniff.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/sniff.h"

#define SNIFF_BYTES 65536

/* Valid UTF-8 without NUL bytes; a sequence cut by the end of a partial
 * read passes. */
static int is_utf8_text(const unsigned char *b, size_t n, int complete)
{
	for (size_t i = 0; i < n;) {
		unsigned c = b[i];
		size_t k;
		if (c == 0)
			return 0;
		if (c < 0x80) {
			i++;
			continue;
		}
		if ((c & 0xe0) == 0xc0 && c >= 0xc2)
			k = 2;
		else if ((c & 0xf0) == 0xe0)
			k = 3;
		else if ((c & 0xf8) == 0xf0 && c <= 0xf4)
			k = 4;
		else
			return 0;
		for (size_t j = 1; j < k; j++) {
			if (i + j >= n)
				return !complete;
			if ((b[i + j] & 0xc0) != 0x80)
				return 0;
		}
		i += k;
	}
	return 1;
}

/* Commas outside double quotes on the line starting at b[*at] (which
 * moves past it); -1 when the line is not complete in b[0, n). */
static long line_commas(const unsigned char *b, size_t n, size_t *at, int complete)
{
	long commas = 0;
	int quoted = 0;
	size_t i = *at;
	for (; i < n && (quoted || b[i] != '\n'); i++) {
		quoted ^= b[i] == '"';
		commas += !quoted && b[i] == ',';
	}
	if (i == n && !complete)
		return -1;
	*at = i + 1;
	return commas;
}

enum dl_file_kind dl_sniff_bytes(const unsigned char *b, size_t n, int complete)
{
	if (n == 0)
		return DL_FILE_EMPTY;
	if (n >= 6 && memcmp(b, "\x93NUMPY", 6) == 0)
		return DL_FILE_NPY;
	if (n >= 4 && (memcmp(b, "PK\3\4", 4) == 0 || memcmp(b, "PK\5\6", 4) == 0))
		return DL_FILE_ZIP;
	if (n >= 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0)
		return DL_FILE_PNG;
	if (n >= 3 && memcmp(b, "\xff\xd8\xff", 3) == 0)
		return DL_FILE_JPEG;
	if (!is_utf8_text(b, n, complete))
		return DL_FILE_UNKNOWN;
	size_t at = 0;
	long head = line_commas(b, n, &at, complete);
	/* a header alone is a table too (of no rows: the reader says so) */
	long row = at < n ? line_commas(b, n, &at, complete) : complete ? 1 : -1;
	return head > 0 && row > 0 ? DL_FILE_CSV : DL_FILE_TEXT;
}

int dl_sniff_path(const char *path, enum dl_file_kind *kind, struct dl_error *err)
{
	struct stat st;
	*kind = DL_FILE_UNKNOWN;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		*kind = DL_FILE_DIR;
		return 0;
	}
	/* a pipe's bytes, once read, are gone for its reader */
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
		return 0;
	FILE *f = fopen(path, "rb");
	if (!f)
		return dl_error_set(err, DL_EINPUT, "%s: cannot open: %s", path, strerror(errno));
	unsigned char *buf = malloc(SNIFF_BYTES);
	if (!buf) {
		fclose(f);
		return dl_error_set(err, DL_ERUN, "out of memory");
	}
	size_t n = fread(buf, 1, SNIFF_BYTES, f);
	int bad = ferror(f), complete = feof(f);
	fclose(f);
	if (!bad)
		*kind = dl_sniff_bytes(buf, n, complete);
	free(buf);
	if (bad)
		return dl_error_set(err, DL_EINPUT, "%s: read error: %s", path, strerror(errno));
	return 0;
}

const char *dl_file_kind_name(enum dl_file_kind k)
{
	switch (k) {
	case DL_FILE_EMPTY: return "an empty file";
	case DL_FILE_DIR: return "a directory";
	case DL_FILE_NPY: return "a .npy array";
	case DL_FILE_ZIP: return "a zip archive (.npz)";
	case DL_FILE_PNG: return "a PNG image";
	case DL_FILE_JPEG: return "a JPEG image";
	case DL_FILE_TEXT: return "UTF-8 text";
	case DL_FILE_CSV: return "a CSV table";
	default: return "a file of unknown kind";
	}
}
