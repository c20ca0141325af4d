/* Errors collected, not printed: library code fills a struct dl_error and
 * returns its code; only main.c prints (as "dlrun: MESSAGE"). */
#ifndef DL_ERROR_H
#define DL_ERROR_H

#include <stdarg.h>

enum {
	DL_OK = 0,
	DL_ERUN = -1,   /* failure while running: I/O, out of memory (exit 1) */
	DL_EINPUT = -2, /* bad invocation or bad input (exit 2) */
};

struct dl_error {
	int code;        /* DL_OK or one of the negative codes */
	char msg[4096];  /* one line, "where: what", no trailing newline */
};

/* Sets err (when not NULL) and returns code. The first error set wins:
 * later calls on an err that already holds an error leave it alone, so the
 * innermost, most precise message survives as it is passed up. */
int dl_error_set(struct dl_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int dl_error_vset(struct dl_error *err, int code, const char *fmt, va_list ap);
void dl_error_clear(struct dl_error *err);

/* Edit distance, for "did you mean" suggestions. */
int dl_edit_distance(const char *a, const char *b);
/* The candidate closest to word when it is close enough to be a likely
 * typo, else NULL. candidates is NULL-terminated. */
const char *dl_suggest(const char *word, const char *const *candidates);

#endif
