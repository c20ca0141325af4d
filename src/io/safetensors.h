/* safetensors files: the reader maps the file (nothing is held twice) and
 * checks everything the reference reader checks; the writer writes F32 (and
 * I64 for integer state) atomically. */
#ifndef DL_SAFETENSORS_H
#define DL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/error.h"
#include "engine/tensor.h"
#include "io/npy.h"

struct dl_st_tensor {
	char *name;
	char dtype_name[8];    /* as in the file: "F32", "I64", ... */
	int dtype;             /* enum dl_dtype, or -1 for a dtype we only
	                        * skip over (BOOL, U16, F8...) */
	struct dl_shape shape;
	int64_t numel;
	size_t offset, nbytes; /* within the data buffer */
};

struct dl_safetensors {
	char *path;
	void *map;             /* the whole file, mmap()ed read-only (NULL
	                        * for dl_st_open_buffer's borrowed bytes) */
	size_t size;
	const unsigned char *data; /* the data buffer, after the header */
	int n;
	struct dl_st_tensor *t;    /* sorted by name */
	int n_meta;
	char **meta;           /* key0, value0, key1, value1, ... */
};

/* Opens and validates path. On error st is left closed (safe to close). */
int dl_st_open(struct dl_safetensors *st, const char *path,
	       struct dl_error *err);
/* The same for the size bytes at buf, which outlive st (it is not
 * copied); path names it in messages. */
int dl_st_open_buffer(struct dl_safetensors *st, const char *path,
		      const void *buf, size_t size, struct dl_error *err);
void dl_st_close(struct dl_safetensors *st);  /* NULL-safe, idempotent */
/* Index of tensor name, or -1. */
int dl_st_find(const struct dl_safetensors *st, const char *name);
/* Converts tensor i (F32, F16, BF16, F64) to float32 into dst, which has
 * room for its numel. Integer dtypes are DL_EINPUT naming the tensor. */
int dl_st_read_f32(const struct dl_safetensors *st, int i, float *dst,
		   struct dl_error *err);
/* Integer tensor i (I64, I32, U8...) into int64. */
int dl_st_read_i64(const struct dl_safetensors *st, int i, int64_t *dst,
		   struct dl_error *err);
/* Value of a __metadata__ key, or NULL. */
const char *dl_st_meta(const struct dl_safetensors *st, const char *key);

struct dl_st_entry {
	const char *name;
	struct dl_shape shape;
	const float *f32;      /* either f32 (written as F32) ... */
	const int64_t *i64;    /* ... or i64 (written as I64) */
};

/* Writes n tensors in the given order, with metadata pairs meta[0..2*n_meta)
 * (may be NULL), to path atomically: a temporary file in the same
 * directory, fsync, rename. The header is padded to a multiple of 8. The
 * bytes depend only on the arguments. path "-" writes to stdout. */
int dl_st_write(const char *path, const struct dl_st_entry *e, int n,
		const char *const *meta, int n_meta, struct dl_error *err);

#endif
