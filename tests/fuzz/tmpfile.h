/* The fuzz input as a file, for readers that take a path: one temporary
 * file per process, rewritten for each input, removed at exit. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char fuzz_path[64];

static void fuzz_unlink(void)
{
	unlink(fuzz_path);
}

static const char *fuzz_file(const uint8_t *data, size_t size, const char *ext)
{
	if (!fuzz_path[0]) {
		snprintf(fuzz_path, sizeof fuzz_path, "/tmp/dlrun-fuzz-%d%s", (int)getpid(), ext);
		atexit(fuzz_unlink);
	}
	FILE *f = fopen(fuzz_path, "wb");
	if (!f)
		return NULL;
	if (size && fwrite(data, 1, size, f) != size) {
		fclose(f);
		return NULL;
	}
	fclose(f);
	return fuzz_path;
}
