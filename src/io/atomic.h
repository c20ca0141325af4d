/* Output files appear whole or not at all: written to a temporary file in
 * the same directory, then fsync()ed and renamed over the target. A target
 * that is a symbolic link is resolved first (the link stays); one that is
 * not a regular file (a FIFO, /dev/null, a terminal) is written directly,
 * since renaming over it would replace the device or pipe itself. */
#ifndef DL_ATOMIC_H
#define DL_ATOMIC_H

#include <stdio.h>

#include "engine/error.h"

struct dl_atomic {
	char *path;   /* target; "-" means stdout (written directly) */
	char *tmp;    /* temporary path, NULL for stdout */
	FILE *f;
	int direct;   /* written in place: stdout, a FIFO or a device */
};

int dl_atomic_open(struct dl_atomic *a, const char *path, struct dl_error *err);
/* Flushes, fsyncs, renames; closes in every case. */
int dl_atomic_commit(struct dl_atomic *a, struct dl_error *err);
/* Removes the temporary file; NULL-safe and safe after commit. */
void dl_atomic_abort(struct dl_atomic *a);

#endif
