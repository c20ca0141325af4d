/* libFuzzer target: an ONNX file through the importer, in memory
 * (dl_onnx_import_buffer). The model file and its weights, written only
 * when the whole graph maps, go to a directory of their own on tmpfs
 * (/dev/shm, else /tmp): removed after each input, the directory at exit
 * (a crash leaves it, empty). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "import/onnx.h"

static char dir[64], yaml_path[96], st_path[96];

static void cleanup(void)
{
	rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!dir[0]) {
		const char *root = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
		snprintf(dir, sizeof dir, "%s/dlrun-fuzz-%d", root, (int)getpid());
		mkdir(dir, 0700);
		snprintf(yaml_path, sizeof yaml_path, "%s/m.yaml", dir);
		snprintf(st_path, sizeof st_path, "%s/m.safetensors", dir);
		atexit(cleanup);
	}
	struct dl_error err = {0};
	if (dl_onnx_import_buffer(data, size, "fuzz.onnx", yaml_path, &err) == 0) {
		unlink(yaml_path);
		unlink(st_path);
	}
	return 0;
}
