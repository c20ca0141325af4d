/* libFuzzer target: a PNG or JPEG file held in memory, decoded
 * (dl_image_decode: libpng's simplified API, libjpeg-turbo with longjmp
 * errors) and, when it decodes, prepared by a pipeline of every step
 * into a [3, 8, 8] sample. */
#include <stdint.h>
#include <stdlib.h>

#include "io/image.h"
#include "io/imgproc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dl_error err = {0};
	struct dl_image img;
	if (dl_image_decode(&img, data, size, "fuzz", &err) != 0)
		return 0;
	struct dl_pipeline p = {0};
	p.step[p.n++] = (struct dl_img_step){.op = DL_IMG_RANDOM_RESIZED_CROP, .n_size = 2,
					     .size = {9, 9}, .scale = {0.08, 1},
					     .ratio = {0.75, 4.0 / 3}};
	p.step[p.n++] = (struct dl_img_step){.op = DL_IMG_HFLIP, .p = 0.5};
	p.step[p.n++] = (struct dl_img_step){.op = DL_IMG_RESIZE, .n_size = 1, .size = {8}};
	p.step[p.n++] = (struct dl_img_step){.op = DL_IMG_CENTER_CROP, .n_size = 2,
					     .size = {8, 8}};
	p.step[p.n++] = (struct dl_img_step){.op = DL_IMG_TO_FLOAT};
	p.step[p.n++] = (struct dl_img_step){.op = DL_IMG_NORMALIZE, .n_ch = 1,
					     .mean = {0.5f}, .std = {0.25f}};
	struct dl_rng rng;
	dl_rng_seed(&rng, size);
	struct dl_img_buf b;
	if (dl_pipeline_run(&p, &img, 3, &rng, &b, "fuzz", &err) == 0)
		free(b.v);
	dl_image_free(&img);
	return 0;
}
