/* libFuzzer target: a model file through the loader, shape inference and
 * the inference and training plans. */
#include <stddef.h>
#include <stdint.h>

#include "dlrun.h"
#include "engine/graph.h"
#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dl_graph *g = NULL;
	struct dl_error err = {0};
	dl_set_max_memory((size_t)256 << 20);
	if (dl_model_load_buffer(&g, "fuzz.yaml", (const char *)data, size, &err) == 0 &&
	    g->shapes_ready) {
		struct dl_error e2 = {0};
		if (dl_graph_plan(g, 0, &e2) == 0) {
			struct dl_error e3 = {0};
			dl_graph_plan(g, 1, &e3);
		}
	}
	dl_graph_free(g);
	return 0;
}
