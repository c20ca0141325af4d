/* PNG (libpng's simplified png_image API) and JPEG (libjpeg-turbo with its
 * default islow DCT and fancy upsampling, as Pillow and torchvision decode)
 * to 8-bit gray or RGB pixels. Every size is checked before memory is
 * asked for; a libjpeg error comes back through longjmp, never exit(). */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef HAVE_PNG
#include <png.h>
#endif
#ifdef HAVE_JPEG
#include <jpeglib.h>
#endif

#include "io/image.h"

#define MAX_FILE_BYTES ((size_t)256 << 20)

enum dl_image_kind dl_image_sniff(const void *bytes, size_t n)
{
	const unsigned char *b = bytes;
	if (n >= 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0)
		return DL_IMAGE_PNG;
	if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff)
		return DL_IMAGE_JPEG;
	return DL_IMAGE_NONE;
}

const char *dl_image_kind_name(enum dl_image_kind k)
{
	return k == DL_IMAGE_PNG ? "PNG" : k == DL_IMAGE_JPEG ? "JPEG" : "image";
}

int dl_image_supported(enum dl_image_kind k)
{
#ifdef HAVE_PNG
	if (k == DL_IMAGE_PNG)
		return 1;
#endif
#ifdef HAVE_JPEG
	if (k == DL_IMAGE_JPEG)
		return 1;
#endif
	(void)k;
	return 0;
}

void dl_image_free(struct dl_image *img)
{
	if (!img)
		return;
	free(img->px);
	img->px = NULL;
}

#if defined(HAVE_PNG) || defined(HAVE_JPEG)
/* w x h x c bytes, or DL_EINPUT when w x h is out of range. */
static int alloc_pixels(struct dl_image *img, int64_t w, int64_t h, int c,
			const char *name, struct dl_error *err)
{
	if (w < 1 || h < 1)
		return dl_error_set(err, DL_EINPUT, "%s: the image has no pixels (%lldx%lld)",
				    name, (long long)w, (long long)h);
	if (w > DL_IMAGE_MAX_PIXELS || h > DL_IMAGE_MAX_PIXELS ||
	    w * h > DL_IMAGE_MAX_PIXELS)
		return dl_error_set(err, DL_EINPUT, "%s: the image is %lldx%lld pixels; dlrun "
				    "decodes at most %lld pixels", name, (long long)w,
				    (long long)h, (long long)DL_IMAGE_MAX_PIXELS);
	img->px = malloc((size_t)(w * h * c));
	if (!img->px)
		return dl_error_set(err, DL_ERUN, "%s: out of memory for %lldx%lld pixels",
				    name, (long long)w, (long long)h);
	img->w = (int)w;
	img->h = (int)h;
	img->c = c;
	return 0;
}
#endif

#ifdef HAVE_PNG
/* The simplified API composites alpha onto black when asked for a format
 * without it; dlrun drops alpha as torchvision's and Pillow's RGB modes do,
 * so an image with alpha is read with it and the alpha dropped here. */
static int decode_png(struct dl_image *img, const void *buf, size_t len,
		      const char *name, struct dl_error *err)
{
	png_image pi;
	memset(&pi, 0, sizeof pi);
	pi.version = PNG_IMAGE_VERSION;
	if (!png_image_begin_read_from_memory(&pi, buf, len))
		return dl_error_set(err, DL_EINPUT, "%s: not a valid PNG: %s", name, pi.message);
	/* 16-bit samples without gamma information are taken as sRGB, as
	 * 8-bit ones are: scaled, not gamma-converted */
	pi.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;
	int color = (pi.format & PNG_FORMAT_FLAG_COLOR) != 0;
	int alpha = (pi.format & PNG_FORMAT_FLAG_ALPHA) != 0;
	int c = color ? 3 : 1, cin = c + alpha;
	pi.format = color ? (alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB)
			  : (alpha ? PNG_FORMAT_GA : PNG_FORMAT_GRAY);
	int rc = alloc_pixels(img, pi.width, pi.height, cin, name, err);
	if (rc) {
		png_image_free(&pi);
		return rc;
	}
	if (!png_image_finish_read(&pi, NULL, img->px, 0, NULL)) {
		rc = dl_error_set(err, DL_EINPUT, "%s: corrupt or truncated PNG: %s", name,
				  pi.message);
		png_image_free(&pi);
		dl_image_free(img);
		return rc;
	}
	png_image_free(&pi);
	if (alpha) {
		size_t n = (size_t)img->w * (size_t)img->h;
		for (size_t i = 0; i < n; i++)
			for (int k = 0; k < c; k++)
				img->px[i * (size_t)c + (size_t)k] = img->px[i * (size_t)cin + (size_t)k];
		img->c = c;
	}
	return 0;
}
#endif

#ifdef HAVE_JPEG
struct jpeg_fail {
	struct jpeg_error_mgr pub;
	jmp_buf jump;
	char msg[JMSG_LENGTH_MAX];
	int warned;                   /* a corrupt-data warning: msg holds it */
};

static void jpeg_fail_exit(j_common_ptr cinfo)
{
	struct jpeg_fail *f = (struct jpeg_fail *)cinfo->err;
	(*cinfo->err->format_message)(cinfo, f->msg);
	longjmp(f->jump, 1);
}

/* libjpeg goes on after corrupt data (filling gray); dlrun refuses such
 * a file, as Pillow does a truncated one: the first warning is kept. */
static void jpeg_fail_message(j_common_ptr cinfo, int level)
{
	struct jpeg_fail *f = (struct jpeg_fail *)cinfo->err;
	if (level < 0 && !f->warned) {
		(*cinfo->err->format_message)(cinfo, f->msg);
		f->warned = 1;
	}
}

static int decode_jpeg(struct dl_image *img, const void *buf, size_t len,
		       const char *name, struct dl_error *err)
{
	struct jpeg_decompress_struct cinfo;
	struct jpeg_fail jerr;
	memset(&jerr, 0, sizeof jerr);
	cinfo.err = jpeg_std_error(&jerr.pub);
	jerr.pub.error_exit = jpeg_fail_exit;
	jerr.pub.emit_message = jpeg_fail_message;
	/* volatile: read after longjmp */
	volatile int rc = 0;
	if (setjmp(jerr.jump)) {
		jpeg_destroy_decompress(&cinfo);
		dl_image_free(img);
		return dl_error_set(err, DL_EINPUT, "%s: corrupt or truncated JPEG: %s", name,
				    jerr.msg);
	}
	jpeg_create_decompress(&cinfo);
	if (len > ULONG_MAX)
		len = ULONG_MAX;
	jpeg_mem_src(&cinfo, (const unsigned char *)buf, (unsigned long)len);
	jpeg_read_header(&cinfo, TRUE);
	int c;
	if (cinfo.jpeg_color_space == JCS_GRAYSCALE) {
		cinfo.out_color_space = JCS_GRAYSCALE;
		c = 1;
	} else if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
		jpeg_destroy_decompress(&cinfo);
		return dl_error_set(err, DL_EINPUT, "%s: a CMYK JPEG; dlrun reads gray and "
				    "RGB JPEGs", name);
	} else {
		cinfo.out_color_space = JCS_RGB;
		c = 3;
	}
	cinfo.dct_method = JDCT_ISLOW;
	cinfo.do_fancy_upsampling = TRUE;
	if ((rc = alloc_pixels(img, cinfo.image_width, cinfo.image_height, c, name, err)) != 0) {
		jpeg_destroy_decompress(&cinfo);
		return rc;
	}
	jpeg_start_decompress(&cinfo);
	if ((int)cinfo.output_width != img->w || (int)cinfo.output_height != img->h ||
	    cinfo.output_components != c) {
		jpeg_destroy_decompress(&cinfo);
		dl_image_free(img);
		return dl_error_set(err, DL_EINPUT, "%s: the JPEG decodes to another size than "
				    "its header says", name);
	}
	size_t stride = (size_t)img->w * (size_t)c;
	while (cinfo.output_scanline < cinfo.output_height) {
		JSAMPROW row = img->px + (size_t)cinfo.output_scanline * stride;
		jpeg_read_scanlines(&cinfo, &row, 1);
		if (jerr.warned)
			break;
	}
	if (!jerr.warned)
		jpeg_finish_decompress(&cinfo);
	jpeg_destroy_decompress(&cinfo);
	if (jerr.warned) {
		dl_image_free(img);
		return dl_error_set(err, DL_EINPUT, "%s: corrupt or truncated JPEG: %s", name,
				    jerr.msg);
	}
	return 0;
}
#endif

int dl_image_decode(struct dl_image *img, const void *buf, size_t len,
		    const char *name, struct dl_error *err)
{
	memset(img, 0, sizeof *img);
	enum dl_image_kind k = dl_image_sniff(buf, len);
	if (k == DL_IMAGE_NONE)
		return dl_error_set(err, DL_EINPUT, "%s: not a PNG or JPEG image", name);
	if (!dl_image_supported(k))
		return dl_error_set(err, DL_EINPUT, "%s: a %s image, but dlrun was built without "
				    "%s support (configure found no %s)", name,
				    dl_image_kind_name(k), dl_image_kind_name(k),
				    k == DL_IMAGE_PNG ? "libpng-dev" : "libjpeg62-turbo-dev");
#ifdef HAVE_PNG
	if (k == DL_IMAGE_PNG)
		return decode_png(img, buf, len, name, err);
#endif
#ifdef HAVE_JPEG
	if (k == DL_IMAGE_JPEG)
		return decode_jpeg(img, buf, len, name, err);
#endif
	return dl_error_set(err, DL_EINPUT, "%s: cannot decode", name);
}

int dl_image_read(struct dl_image *img, const char *path, struct dl_error *err)
{
	memset(img, 0, sizeof *img);
	FILE *f = fopen(path, "rb");
	if (!f)
		return dl_error_set(err, DL_EINPUT, "%s: cannot open: %s", path, strerror(errno));
	struct stat sb;
	if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
		fclose(f);
		return dl_error_set(err, DL_EINPUT, "%s: not a regular file", path);
	}
	if ((uint64_t)sb.st_size > MAX_FILE_BYTES) {
		fclose(f);
		return dl_error_set(err, DL_EINPUT, "%s: %lld bytes; dlrun reads images of at "
				    "most %zu MiB", path, (long long)sb.st_size, MAX_FILE_BYTES >> 20);
	}
	size_t len = (size_t)sb.st_size;
	unsigned char *buf = malloc(len + 1);
	if (!buf) {
		fclose(f);
		return dl_error_set(err, DL_ERUN, "%s: out of memory", path);
	}
	size_t got = fread(buf, 1, len, f);
	int bad = ferror(f);
	fclose(f);
	if (bad || got != len) {
		free(buf);
		return dl_error_set(err, bad ? DL_ERUN : DL_EINPUT, "%s: read error: %s", path,
				    bad ? strerror(errno) : "the file changed while read");
	}
	int rc = dl_image_decode(img, buf, len, path, err);
	free(buf);
	return rc;
}
