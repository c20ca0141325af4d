/* libFuzzer target: the text tensor reader, rows of a width set by the
 * first row, two at a time. */
#include <stdio.h>
#include <stdlib.h>

#include "io/text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	FILE *f = fmemopen((void *)data, size, "rb");
	if (!f)
		return 0;
	struct dl_text_reader r;
	dl_text_reader_init(&r, f, "fuzz.txt");
	float *dst = malloc(2 * 4096 * sizeof *dst);
	int64_t width = 0;
	for (int i = 0; dst && i < 64; i++) {
		struct dl_error err = {0};
		if (dl_text_read_rows(&r, &width, 4096, dst, 2, &err) <= 0)
			break;
	}
	free(dst);
	dl_text_reader_free(&r);
	fclose(f);
	return 0;
}
