/* The --format text stream: one sample per line. Lines are read one at a
 * time with getline and never beyond the requested rows, so a co-process
 * that writes a line and waits for the answer is served at once. */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/text.h"

void dl_text_reader_init(struct dl_text_reader *r, FILE *f, const char *name)
{
	memset(r, 0, sizeof *r);
	r->f = f;
	r->name = name;
}

void dl_text_reader_free(struct dl_text_reader *r)
{
	if (!r)
		return;
	free(r->buf);
	r->buf = NULL;
	r->cap = 0;
}

static int is_sep(char c)
{
	return c == ' ' || c == '\t' || c == ',' || c == '\r' || c == '\n' ||
	       c == '\v' || c == '\f';
}

/* Parses the values of the line in r->buf (length len) into dst, storing at
 * most room of them; returns how many the line holds, or DL_EINPUT. */
static int64_t parse_line(struct dl_text_reader *r, size_t len, float *dst,
			  int64_t room, struct dl_error *err)
{
	char *s = r->buf, *end = s + len;
	if (memchr(s, '\0', len))
		return dl_error_set(err, DL_EINPUT, "%s:%lld: line contains a NUL "
				    "byte", r->name, (long long)r->line);
	char *hash = memchr(s, '#', len);
	if (hash)
		end = hash;
	*end = '\0';
	int64_t n = 0;
	while (s < end) {
		while (s < end && is_sep(*s))
			s++;
		if (s == end)
			break;
		char *tok = s;
		while (s < end && !is_sep(*s))
			s++;
		*s = '\0';  /* s < end or s == end, both inside the buffer */
		char *stop;
		errno = 0;
		double v = strtod(tok, &stop);
		long col = (long)(tok - r->buf) + 1;
		if (stop != s || stop == tok)
			return dl_error_set(err, DL_EINPUT, "%s:%lld:%ld: '%.32s%s' is "
					    "not a number", r->name,
					    (long long)r->line, col, tok,
					    strlen(tok) > 32 ? "..." : "");
		/* strtod gives HUGE_VAL with ERANGE for 1e999, and a finite
		 * double such as 1e39 silently becomes inf as a float */
		if ((errno == ERANGE && isinf(v)) ||
		    (isfinite(v) && isinf((float)v)))
			return dl_error_set(err, DL_EINPUT, "%s:%lld:%ld: %.32s%s is "
					    "beyond the float32 range", r->name,
					    (long long)r->line, col, tok,
					    strlen(tok) > 32 ? "..." : "");
		/* an id of a dtype: int input is a whole number (NaN is not;
		 * the op checks the range) */
		if (r->ints && v != floor(v))
			return dl_error_set(err, DL_EINPUT, "%s:%lld:%ld: %.32s%s is not an "
					    "integer; the input has dtype: int (token ids)",
					    r->name, (long long)r->line, col, tok,
					    strlen(tok) > 32 ? "..." : "");
		if (n < room)
			dst[n] = (float)v;
		n++;
		if (s < end)
			s++;
	}
	return n;
}

/* Bytes a line may take: room for every value written with 64 characters,
 * plus a comment. A longer line is refused before it is read whole. */
static size_t line_limit(int64_t values)
{
	if (values < 0 || values > (int64_t)(SIZE_MAX / 128))
		return SIZE_MAX / 2;
	return (size_t)values * 64 + 65536;
}

/* Reads one line (with its newline, if any) into r->buf, NUL-terminated,
 * growing it up to limit bytes. Returns its length, -1 at end of stream,
 * or DL_EINPUT / DL_ERUN with err set. */
static ssize_t read_line(struct dl_text_reader *r, size_t limit,
			 struct dl_error *err)
{
	size_t len = 0;
	int c;
	while ((c = getc_unlocked(r->f)) != EOF) {
		if (len + 2 > r->cap) {
			if (len >= limit)
				return dl_error_set(err, DL_EINPUT, "%s:%lld: line is "
						    "longer than %zu bytes, more than "
						    "a row of the model's size takes",
						    r->name, (long long)r->line + 1, limit);
			size_t cap = r->cap ? r->cap * 2 : 4096;
			if (cap > limit + 2)
				cap = limit + 2;
			char *b = realloc(r->buf, cap);
			if (!b)
				return dl_error_set(err, DL_ERUN, "out of memory");
			r->buf = b;
			r->cap = cap;
		}
		r->buf[len++] = (char)c;
		if (c == '\n')
			break;
	}
	if (ferror(r->f))
		return dl_error_set(err, DL_ERUN, "%s: read error: %s", r->name,
				    strerror(errno));
	if (len == 0)
		return -1;
	r->buf[len] = '\0';
	return (ssize_t)len;
}

int64_t dl_text_read_rows(struct dl_text_reader *r, int64_t *width,
			  int64_t cap_values, float *dst, int64_t max_rows,
			  struct dl_error *err)
{
	int from_first = *width <= 0;
	if (!from_first && *width > cap_values)
		return dl_error_set(err, DL_ERUN, "%s: internal error: width %lld "
				    "exceeds room %lld", r->name,
				    (long long)*width, (long long)cap_values);
	int64_t rows = 0, first_line = 0;
	while (rows < max_rows) {
		ssize_t len = read_line(r, line_limit(*width > 0 ? *width : cap_values), err);
		if (len < -1)
			return len;
		if (len < 0)
			break;
		r->line++;
		int64_t w = *width > 0 ? *width : cap_values;
		int64_t n = parse_line(r, (size_t)len, dst + rows * w, w, err);
		if (n < 0)
			return n;
		if (n == 0)
			continue;  /* blank or comment */
		if (*width <= 0) {
			if (n > cap_values)
				return dl_error_set(err, DL_EINPUT, "%s:%lld: row "
						    "has %lld values, more than "
						    "the %lld expected", r->name,
						    (long long)r->line,
						    (long long)n,
						    (long long)cap_values);
			/* the row was stored with stride cap_values; rows == 0
			 * here, so it already sits at dst */
			*width = n;
			first_line = r->line;
		} else if (n != *width) {
			if (from_first)
				return dl_error_set(err, DL_EINPUT, "%s:%lld: row "
						    "has %lld values, the row on "
						    "line %lld has %lld", r->name,
						    (long long)r->line,
						    (long long)n,
						    (long long)first_line,
						    (long long)*width);
			return dl_error_set(err, DL_EINPUT, "%s:%lld: row has %lld "
					    "values, expected %lld", r->name,
					    (long long)r->line, (long long)n,
					    (long long)*width);
		}
		rows++;
	}
	return rows;
}

int dl_text_write_rows(FILE *f, const char *name, const float *src,
		       int64_t rows, int64_t width, struct dl_error *err)
{
	for (int64_t i = 0; i < rows; i++) {
		for (int64_t j = 0; j < width; j++)
			if (fprintf(f, j ? " %.9g" : "%.9g",
				    (double)src[i * width + j]) < 0)
				return dl_error_set(err, DL_ERUN, "%s: write error: "
						    "%s", name, strerror(errno));
		if (fputc('\n', f) == EOF)
			return dl_error_set(err, DL_ERUN, "%s: write error: %s",
					    name, strerror(errno));
	}
	/* a co-process waits for these lines */
	if (fflush(f) != 0)
		return dl_error_set(err, DL_ERUN, "%s: write error: %s", name,
				    strerror(errno));
	return 0;
}
