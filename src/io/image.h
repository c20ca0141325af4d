/* PNG and JPEG images decoded to 8-bit pixels (libpng's simplified API,
 * libjpeg-turbo), told apart by their magic bytes. Nothing here knows
 * about models: src/io/imgproc.h turns pixels into inputs. */
#ifndef DL_IMAGE_H
#define DL_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/error.h"

/* The most pixels (width x height) a file may declare: 8192 x 8192. */
#define DL_IMAGE_MAX_PIXELS ((int64_t)1 << 26)

enum dl_image_kind { DL_IMAGE_NONE = 0, DL_IMAGE_PNG, DL_IMAGE_JPEG };

/* Decoded pixels, rows top to bottom, channels interleaved (HWC). */
struct dl_image {
	int w, h;
	int c;          /* 1 (gray) or 3 (RGB); alpha is dropped */
	uint8_t *px;    /* [h, w, c], malloc()ed; dl_image_free frees it */
};

/* What the first n bytes are: a PNG, a JPEG, or neither. */
enum dl_image_kind dl_image_sniff(const void *bytes, size_t n);
/* "PNG", "JPEG" (for messages). */
const char *dl_image_kind_name(enum dl_image_kind k);
/* 1 when this build decodes images of that kind. */
int dl_image_supported(enum dl_image_kind k);

/* Decodes the len bytes at buf; name is the file for messages. A file
 * this build cannot decode, a corrupt or truncated one, or one larger
 * than DL_IMAGE_MAX_PIXELS is DL_EINPUT naming it and why. Palette and
 * low-bit-depth images become RGB or gray; 16-bit samples are scaled to
 * 8 bits as libpng does (round(v * 255 / 65535)). */
int dl_image_decode(struct dl_image *img, const void *buf, size_t len,
		    const char *name, struct dl_error *err);
/* The same for a file (at most 256 MiB). */
int dl_image_read(struct dl_image *img, const char *path, struct dl_error *err);
void dl_image_free(struct dl_image *img);   /* NULL-safe */

#endif
