/* Image preparation steps as torchvision's transforms on a uint8 tensor:
 * resize (bilinear, antialiased), center_crop, random_resized_crop,
 * horizontal_flip, grayscale, to_float, normalize. A pipeline is a list of
 * steps applied to decoded pixels, giving a [C, H, W] float sample. */
#ifndef DL_IMGPROC_H
#define DL_IMGPROC_H

#include <stdint.h>

#include "engine/error.h"
#include "engine/rng.h"
#include "io/image.h"

#define DL_PIPE_MAX_STEPS 16
#define DL_PIPE_MAX_CH 4

enum dl_img_op {
	DL_IMG_RESIZE,            /* size[0] (shorter side) or [size[0], size[1]] */
	DL_IMG_CENTER_CROP,       /* [size[0], size[1]] */
	DL_IMG_RANDOM_RESIZED_CROP,   /* size, scale, ratio */
	DL_IMG_HFLIP,             /* p */
	DL_IMG_GRAYSCALE,         /* channels: 1 or 3 */
	DL_IMG_TO_FLOAT,
	DL_IMG_NORMALIZE,         /* mean, std [channels] */
};

struct dl_img_step {
	enum dl_img_op op;
	int n_size;               /* 1: the shorter side (resize), 2: [h, w] */
	int64_t size[2];
	double scale[2], ratio[2];
	double p;
	int channels;
	int n_ch;                 /* values in mean and std */
	float mean[DL_PIPE_MAX_CH], std[DL_PIPE_MAX_CH];
	int line, col;            /* the step's place in the model file */
};

struct dl_pipeline {
	int n;
	struct dl_img_step step[DL_PIPE_MAX_STEPS];
};

/* A sample being prepared: planar [c, h, w] floats; 0-255 whole numbers
 * while `bytes` (rounded after each step, as a uint8 tensor is), 0-1 after
 * to_float. */
struct dl_img_buf {
	int c, h, w;
	int bytes;
	float *v;                 /* malloc()ed */
};

/* Runs pipe on img into out (caller frees out->v): a gray image is made
 * RGB first when want_c is 3 (as torchvision's ImageFolder loader does);
 * rng draws the random steps' choices (NULL: a generator seeded with 0);
 * name (the file) prefixes errors. */
int dl_pipeline_run(const struct dl_pipeline *pipe, const struct dl_image *img,
		    int want_c, struct dl_rng *rng, struct dl_img_buf *out,
		    const char *name, struct dl_error *err);
/* 1 when a step draws random numbers. */
int dl_pipeline_random(const struct dl_pipeline *pipe);
/* The step names, as the model file spells them. */
const char *dl_img_op_name(enum dl_img_op op);

/* Single steps, for tests: resize b to h x w in place (antialiased
 * bilinear as torch's _upsample_bilinear2d_aa, then rounded when bytes). */
int dl_img_resize(struct dl_img_buf *b, int h, int w, struct dl_error *err);
/* Crops rows [top, top + h) and columns [left, left + w) (zeros outside). */
int dl_img_crop(struct dl_img_buf *b, int top, int left, int h, int w,
		struct dl_error *err);

#endif
