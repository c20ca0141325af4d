/* .npz archives (zip of NAME.npy members, stored or deflated, zip64):
 * members are looked up by array name and read as .npy streams. */
#ifndef DL_NPZ_H
#define DL_NPZ_H

#include <stdio.h>

#include "engine/error.h"

struct dl_npz_member {
	char *name;            /* without ".npy" */
	int method;            /* 0 stored, 8 deflated */
	unsigned long long offset, csize, usize; /* offset of the data */
	unsigned long crc;     /* CRC-32 of the uncompressed bytes */
};

struct dl_npz {
	char *path;
	FILE *f;
	int n;
	struct dl_npz_member *m;
};

int dl_npz_open(struct dl_npz *z, const char *path, struct dl_error *err);
/* The same for the size bytes at buf, which outlive z (it is not
 * copied); path names it in messages. */
int dl_npz_open_buffer(struct dl_npz *z, const char *path, const void *buf,
		       size_t size, struct dl_error *err);
void dl_npz_close(struct dl_npz *z);  /* NULL-safe, idempotent */
/* Opens member `name` as a stream positioned at its .npy bytes (in
 * memory up to 1 MiB, else a temporary file); the caller
 * fclose()s it. NULL with err set when absent or malformed. */
FILE *dl_npz_member(struct dl_npz *z, const char *name, struct dl_error *err);

#endif
