/* libFuzzer target: `dlrun infer` on a small model (a linear layer, a
 * convolution, a softmax), the fuzz input as its stdin (an fmemopen()
 * stream put in place of stdin: no file per input), in npy and text
 * formats, one thread; stdout goes to /dev/null. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dlrun.h"
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
	static char empty[1];
	FILE *in = fmemopen(size ? (void *)data : empty, size ? size : 1, "rb");
	if (!in)
		return 0;
	if (!size)
		fgetc(in);  /* at the end: an empty stream */
	int text = size == 0 || data[0] != 0x93;  /* npy starts with \x93NUMPY */
	FILE *keep = stdin;
	stdin = in;
	char *argv[] = {"infer", model_path, "-w", weights_path, "--format",
			text ? "text" : "npy", "--batch-size", "3", "--threads", "1", NULL};
	struct dl_error err = {0};
	optind = 0;    /* glibc: reinitialise getopt */
	verb_infer.run(10, argv, &err);
	fflush(stdout);
	stdin = keep;
	fclose(in);
	return 0;
}
