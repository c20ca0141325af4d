/* The --format text tensor stream: one sample per line, values separated
 * by spaces, tabs or commas, '#' starts a comment, blank lines skipped. */
#ifndef DL_TEXT_H
#define DL_TEXT_H

#include <stdint.h>
#include <stdio.h>

#include "engine/error.h"

struct dl_text_reader {
	FILE *f;
	const char *name;  /* for messages */
	int64_t line;      /* lines consumed so far */
	char *buf;         /* line buffer (getline) */
	size_t cap;
	int ints;          /* values are integers (token ids): 1.5 is refused */
};

void dl_text_reader_init(struct dl_text_reader *r, FILE *f, const char *name);
void dl_text_reader_free(struct dl_text_reader *r);
/* Reads up to max_rows samples of *width values into dst. *width <= 0
 * means "set it from the first row" (then rows must fit in dst: the caller
 * passes room for max_rows * cap_values values). Returns the number of rows
 * read (0 at end of stream) or DL_EINPUT ("NAME:LINE: row has 5 values, the
 * model needs 4", or a bad number at its column). Does not read past the
 * last requested row, so it works on a pipe in a co-process. */
int64_t dl_text_read_rows(struct dl_text_reader *r, int64_t *width,
			  int64_t cap_values, float *dst, int64_t max_rows,
			  struct dl_error *err);
/* Writes rows lines of width values, "%.9g" separated by spaces. */
int dl_text_write_rows(FILE *f, const char *name, const float *src,
		       int64_t rows, int64_t width, struct dl_error *err);

#endif
