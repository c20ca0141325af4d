/* The CSV reader (io/csv.h). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "io/csv.h"

int dl_csv_open(struct dl_csv *c, const char *path, struct dl_error *err)
{
	memset(c, 0, sizeof *c);
	c->path = path;
	c->f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	if (!c->f)
		return dl_error_set(err, DL_EINPUT, "%s: cannot open: %s", path, strerror(errno));
	return 0;
}

void dl_csv_close(struct dl_csv *c)
{
	if (!c)
		return;
	if (c->f && c->f != stdin)
		fclose(c->f);
	free(c->buf);
	free(c->text);
	free(c->field);
	free(c->col);
	memset(c, 0, sizeof *c);
}

static int add_field(struct dl_csv *c, size_t at, long col)
{
	if (c->n == c->cap_fields) {
		int k = c->cap_fields ? c->cap_fields * 2 : 16;
		char **f = realloc(c->field, (size_t)k * sizeof *f);
		if (f)
			c->field = f;
		long *l = realloc(c->col, (size_t)k * sizeof *l);
		if (l)
			c->col = l;
		if (!f || !l)
			return -1;
		c->cap_fields = k;
	}
	c->field[c->n] = (char *)(uintptr_t)at;   /* an offset until the row is whole */
	c->col[c->n++] = col;
	return 0;
}

static int is_blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
			return 0;
	return 1;
}

int dl_csv_next(struct dl_csv *c, struct dl_error *err)
{
	ssize_t len;
	do {
		errno = 0;
		len = getline(&c->buf, &c->cap, c->f);
		if (len < 0) {
			if (ferror(c->f))
				return dl_error_set(err, DL_EINPUT, "%s: read error: %s", c->path,
						    strerror(errno));
			return 0;
		}
		c->line++;
	} while (is_blank(c->buf, (size_t)len));
	size_t n = (size_t)len;
	if (n && c->buf[n - 1] == '\n')
		n--;
	if (n && c->buf[n - 1] == '\r')
		n--;
	if (c->text_cap < 2 * n + 2) {
		char *t = realloc(c->text, 2 * n + 2);
		if (!t)
			return dl_error_set(err, DL_ERUN, "out of memory");
		c->text = t;
		c->text_cap = 2 * n + 2;
	}
	/* the fields' bytes go to text, each NUL-terminated (never longer
	 * than the line plus one NUL per field) */
	c->n = 0;
	size_t o = 0, i = 0;
	for (;;) {
		while (i < n && (c->buf[i] == ' ' || c->buf[i] == '\t'))
			i++;
		if (add_field(c, o, (long)i + 1))
			return dl_error_set(err, DL_ERUN, "out of memory");
		if (i < n && c->buf[i] == '"') {
			size_t q = i++;
			for (;;) {
				if (i >= n)
					return dl_error_set(err, DL_EINPUT, "%s:%ld:%zu: a quoted field "
							    "that does not end on its line", c->path,
							    c->line, q + 1);
				if (c->buf[i] == '"' && i + 1 < n && c->buf[i + 1] == '"') {
					c->text[o++] = '"';
					i += 2;
				} else if (c->buf[i] == '"') {
					i++;
					break;
				} else {
					c->text[o++] = c->buf[i++];
				}
			}
			while (i < n && (c->buf[i] == ' ' || c->buf[i] == '\t'))
				i++;
			if (i < n && c->buf[i] != ',')
				return dl_error_set(err, DL_EINPUT, "%s:%ld:%zu: text after a "
						    "quoted field; a field is quoted whole", c->path,
						    c->line, i + 1);
		} else {
			size_t s = i;
			while (i < n && c->buf[i] != ',')
				i++;
			size_t e = i;
			while (e > s && (c->buf[e - 1] == ' ' || c->buf[e - 1] == '\t'))
				e--;
			memcpy(c->text + o, c->buf + s, e - s);
			o += e - s;
		}
		c->text[o++] = '\0';
		if (i >= n)
			break;
		i++;   /* the comma */
	}
	for (int k = 0; k < c->n; k++)
		c->field[k] = c->text + (size_t)(uintptr_t)c->field[k];
	return 1;
}
