/* libFuzzer target: an .npz archive opened (in memory: dl_npz_open_buffer)
 * and every member read as .npy. */
#include <stdlib.h>

#include "io/npy.h"
#include "io/npz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dl_npz z;
	struct dl_error err = {0};
	if (dl_npz_open_buffer(&z, "fuzz.npz", data, size, &err) == 0) {
		for (int i = 0; i < z.n && i < 16; i++) {
			struct dl_error e = {0};
			FILE *m = dl_npz_member(&z, z.m[i].name, &e);
			if (!m)
				continue;
			struct dl_tensor t = {0};
			dl_npy_read(m, "member", &t, &e);
			free(t.data);
			fclose(m);
		}
	}
	dl_npz_close(&z);
	return 0;
}
