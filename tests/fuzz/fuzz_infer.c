/* libFuzzer target: `dlrun infer` on a small model (a linear layer, a
 * convolution, a softmax), the fuzz input as its stdin, in npy and text
 * formats; stdout goes to /dev/null. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dlrun.h"
#include "tmpfile.h"
#include "verbs/verbs.h"

static const char model[] =
	"inputs: {x: {shape: [2, 6]}}\n"
	"layers:\n"
	"  - conv1d: {out_channels: 3, kernel_size: 3, padding: 1}\n"
	"  - flatten\n"
	"  - linear: {out_features: 4}\n"
	"  - softmax: {dim: -1}\n";

static char model_path[64], weights_path[64];

static void setup(void)
{
	snprintf(model_path, sizeof model_path, "/tmp/dlrun-fuzz-%d-m.yaml", (int)getpid());
	snprintf(weights_path, sizeof weights_path, "/tmp/dlrun-fuzz-%d-m.safetensors",
		 (int)getpid());
	FILE *f = fopen(model_path, "w");
	fputs(model, f);
	fclose(f);
	char *argv[] = {"init", model_path, "-o", weights_path, NULL};
	struct dl_error err = {0};
	if (verb_init.run(4, argv, &err) != 0) {
		fprintf(stderr, "fuzz_infer: init failed: %s\n", err.msg);
		_exit(1);
	}
	int null = open("/dev/null", O_WRONLY);
	dup2(null, 1);
	close(null);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!model_path[0])
		setup();
	const char *path = fuzz_file(data, size, ".in");
	if (!path)
		return 0;
	int text = size == 0 || data[0] != 0x93;  /* npy starts with \x93NUMPY */
	for (int k = 0; k < 1; k++) {
		int fd = open(path, O_RDONLY);
		dup2(fd, 0);
		close(fd);
		clearerr(stdin);
		fseek(stdin, 0, SEEK_SET);
		char *argv[] = {"infer", model_path, "-w", weights_path, "--format",
				text ? "text" : "npy", "--batch-size", "3", NULL};
		struct dl_error err = {0};
		optind = 0;    /* glibc: reinitialise getopt */
		verb_infer.run(8, argv, &err);
		fflush(stdout);
	}
	return 0;
}
