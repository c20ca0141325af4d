/* libFuzzer target: a safetensors file opened, validated and every tensor
 * converted. */
#include <stdlib.h>

#include "io/safetensors.h"
#include "tmpfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_file(data, size, ".safetensors");
	if (!path)
		return 0;
	struct dl_safetensors st;
	struct dl_error err = {0};
	if (dl_st_open(&st, path, &err) == 0) {
		for (int i = 0; i < st.n; i++) {
			if (st.t[i].numel > (1 << 20))
				continue;
			void *buf = malloc((size_t)(st.t[i].numel ? st.t[i].numel : 1) * 8);
			struct dl_error e = {0};
			if (buf && dl_st_read_f32(&st, i, buf, &e) != 0) {
				struct dl_error e2 = {0};
				dl_st_read_i64(&st, i, buf, &e2);
			}
			free(buf);
		}
		dl_st_meta(&st, "format");
	}
	dl_st_close(&st);
	return 0;
}
