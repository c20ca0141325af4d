/* libFuzzer target: a stream of .npy arrays read back to back. */
#include <stdio.h>
#include <stdlib.h>

#include "io/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	FILE *f = fmemopen((void *)data, size, "rb");
	if (!f)
		return 0;
	for (int i = 0; i < 8; i++) {
		struct dl_error err = {0};
		struct dl_tensor t = {0};
		int rc = dl_npy_read(f, "fuzz.npy", &t, &err);
		free(t.data);
		if (rc <= 0)
			break;
	}
	fclose(f);
	return 0;
}
