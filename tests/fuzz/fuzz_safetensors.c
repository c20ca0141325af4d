/* libFuzzer target: a safetensors file opened (in memory:
 * dl_st_open_buffer, the validation dl_st_open does after mapping the
 * file), validated and every tensor converted. */
#include <stdlib.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dl_safetensors st;
	struct dl_error err = {0};
	if (dl_st_open_buffer(&st, "fuzz.safetensors", data, size, &err) == 0) {
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
