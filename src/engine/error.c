/* Error collection and "did you mean" suggestions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"

int dl_error_vset(struct dl_error *err, int code, const char *fmt, va_list ap)
{
	if (!err || err->code != DL_OK)
		return code;
	err->code = code;
	vsnprintf(err->msg, sizeof err->msg, fmt, ap);
	/* One line, always: a message built from user text must not break
	 * the "dlrun: where: what" form. */
	for (char *p = err->msg; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	return code;
}

int dl_error_set(struct dl_error *err, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	dl_error_vset(err, code, fmt, ap);
	va_end(ap);
	return code;
}

void dl_error_clear(struct dl_error *err)
{
	if (err) {
		err->code = DL_OK;
		err->msg[0] = '\0';
	}
}

/* Optimal string alignment distance: insertions, deletions, substitutions
 * and transpositions of neighbours ("rleu" is one slip from "relu"). */
int dl_edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la > 64 || lb > 64)
		return 1000;
	int d[65][65];
	for (size_t i = 0; i <= la; i++)
		d[i][0] = (int)i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = (int)j;
	for (size_t i = 1; i <= la; i++)
		for (size_t j = 1; j <= lb; j++) {
			int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			if (d[i - 1][j] + 1 < best)
				best = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < best)
				best = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] &&
			    a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
				best = d[i - 2][j - 2] + 1;
			d[i][j] = best;
		}
	return d[la][lb];
}

const char *dl_suggest(const char *word, const char *const *candidates)
{
	const char *best = NULL;
	int best_d = 1000;
	size_t lw = strlen(word);
	for (const char *const *c = candidates; *c; c++) {
		int d = dl_edit_distance(word, *c);
		/* a prefix ("kernel" for "kernel_size") is a likely slip too */
		if (lw >= 3 && strncmp(word, *c, lw) == 0)
			d = d < 2 ? d : 2;
		if (d < best_d) {
			best_d = d;
			best = *c;
		}
	}
	size_t limit = lw <= 4 ? 1 : lw <= 8 ? 2 : 3;
	return best && (size_t)best_d <= limit ? best : NULL;
}
