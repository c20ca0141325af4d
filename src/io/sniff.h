/* What kind of file a path holds, told by its first bytes (magic numbers),
 * never by its name: one place that every verb reading user files asks, so
 * a new kind is added here once. */
#ifndef DL_SNIFF_H
#define DL_SNIFF_H

#include <stddef.h>

#include "engine/error.h"

enum dl_file_kind {
	DL_FILE_UNKNOWN,   /* none of these: binary of another kind */
	DL_FILE_EMPTY,     /* no bytes */
	DL_FILE_DIR,       /* a directory */
	DL_FILE_NPY,       /* \x93NUMPY */
	DL_FILE_ZIP,       /* PK\3\4 or PK\5\6: an .npz */
	DL_FILE_PNG,       /* \x89PNG\r\n\x1a\n */
	DL_FILE_JPEG,      /* \xff\xd8\xff */
	DL_FILE_TEXT,      /* UTF-8 text without NUL bytes */
	DL_FILE_CSV,       /* text whose first two lines (or only line) hold
	                    * commas outside double quotes: a table with a
	                    * header (a row with a field too many or too few
	                    * is the CSV reader's to name) */
};

/* The kind of the first n bytes of a file (all of it when complete: a
 * multi-byte character cut at the end of a partial read is not an error). */
enum dl_file_kind dl_sniff_bytes(const unsigned char *b, size_t n, int complete);
/* The kind of the file at path (its first 64 KiB). A path that cannot be
 * opened is DL_EINPUT, naming it; a pipe or device is not read (it could
 * not be read again) and is DL_FILE_UNKNOWN. */
int dl_sniff_path(const char *path, enum dl_file_kind *kind, struct dl_error *err);
/* For messages: "a .npy array", "a PNG image", "UTF-8 text", ... */
const char *dl_file_kind_name(enum dl_file_kind k);

#endif
