/* NumPy .npy arrays on streams: read (versions 1.0 to 3.0; <f4 <f8 <i4 <i8
 * |u1, either byte-order mark for 1-byte types), converted to float32 or
 * int64; write <f4, version 1.0. Arrays follow each other back to back on
 * one stream, so nothing here seeks or reads ahead. */
#ifndef DL_NPY_H
#define DL_NPY_H

#include <stdint.h>
#include <stdio.h>

#include "engine/error.h"
#include "engine/tensor.h"

enum dl_dtype { DL_F32, DL_F64, DL_I32, DL_I64, DL_U8, DL_F16, DL_BF16 };

/* Shared with the safetensors reader: bytes per element, and conversion of
 * n little-endian elements at src (no alignment needed). dl_dtype_to_i64
 * returns the index of the first float element that is not a whole number
 * in int64 range, or -1 when all converted. */
size_t dl_dtype_size(enum dl_dtype t);
void dl_dtype_to_f32(enum dl_dtype t, const void *src, size_t n, float *dst);
int64_t dl_dtype_to_i64(enum dl_dtype t, const void *src, size_t n,
			int64_t *dst);

struct dl_npy_header {
	enum dl_dtype dtype;
	int fortran;           /* column-major data */
	struct dl_shape shape; /* () is ndim 0, one element */
	int64_t numel;
	size_t data_bytes;     /* numel * item size, overflow-checked */
};

/* Reads one array header from f. name is used in messages ("x.npy",
 * "stdin"). Returns 1 with h filled, 0 at a clean end of stream (no byte
 * left), DL_EINPUT for anything malformed (bad magic, version, header
 * syntax, dtype, shape overflow, truncation). */
int dl_npy_read_header(FILE *f, const char *name, struct dl_npy_header *h,
		       struct dl_error *err);
/* Reads the next count elements of the array's data (C order; a Fortran
 * order array must be read whole, count == numel) into dst as float32.
 * Truncated data is DL_EINPUT. */
int dl_npy_read_f32(FILE *f, const char *name, const struct dl_npy_header *h,
		    int64_t count, float *dst, struct dl_error *err);
/* The same into int64 (integer dtypes; floats must hold whole numbers). */
int dl_npy_read_i64(FILE *f, const char *name, const struct dl_npy_header *h,
		    int64_t count, int64_t *dst, struct dl_error *err);
/* Header and all data as float32 in one call: returns 1 and sets t (data
 * malloc()ed, the caller frees t->data), 0 at clean end, or an error. */
int dl_npy_read(FILE *f, const char *name, struct dl_tensor *t,
		struct dl_error *err);

/* Writes a version 1.0 '<f4' header for shape. */
int dl_npy_write_header(FILE *f, const char *name, const struct dl_shape *s,
			struct dl_error *err);
int dl_npy_write_f32(FILE *f, const char *name, const float *data,
		     int64_t count, struct dl_error *err);
/* Header and data. */
int dl_npy_write(FILE *f, const char *name, const struct dl_tensor *t,
		 struct dl_error *err);

#endif
