/* A CSV reader (RFC 4180 as spreadsheets and pandas write it): rows of
 * comma-separated fields, double-quoted fields with "" for a quote,
 * blank lines skipped, CRLF or LF; every field carries its line and
 * column for messages. Bytes in, strings out: no meaning is given here. */
#ifndef DL_CSV_H
#define DL_CSV_H

#include <stdio.h>

#include "engine/error.h"

struct dl_csv {
	const char *path;     /* for messages */
	FILE *f;
	long line;            /* of the row last read, 1-based */
	char *buf;            /* the line as read */
	size_t cap;
	char *text;           /* the row's fields, NUL-terminated, back to back */
	size_t text_cap;
	int n;                /* fields of the row last read */
	char **field;         /* [n] into text */
	long *col;            /* [n] 1-based column of each field's first byte */
	int cap_fields;
};

/* Opens path ("-": stdin) for reading; DL_EINPUT when it cannot. */
int dl_csv_open(struct dl_csv *c, const char *path, struct dl_error *err);
/* Reads the next row into c->field, c->col, c->n and c->line: 1, or 0 at
 * the end of the file. Unquoted fields lose their surrounding spaces. A
 * quote that does not end on its line is DL_EINPUT at path:line:col. */
int dl_csv_next(struct dl_csv *c, struct dl_error *err);
void dl_csv_close(struct dl_csv *c);   /* NULL-safe; frees everything */

#endif
