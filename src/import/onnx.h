/* ONNX import: reads an ONNX model (protobuf-c code generated from the
 * system's onnx.proto at build time) and writes the equivalent dlrun model
 * file and its safetensors weights. Shape arithmetic that depends only on
 * static sizes is folded here; the batch dimension stays symbolic. */
#ifndef DL_IMPORT_ONNX_H
#define DL_IMPORT_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include "engine/error.h"

/* Translates onnx_path into yaml_path and, beside it, the weights file
 * (yaml_path with .yaml/.yml replaced by .safetensors, else appended).
 * Both files are written atomically, and only when the whole graph could
 * be mapped; otherwise DL_EINPUT with one line naming the node, its op
 * type and what could not be mapped. */
int dl_onnx_import(const char *onnx_path, const char *yaml_path,
		   struct dl_error *err);

/* The same for the SIZE bytes of an ONNX file at BUF (read whole by
 * dl_onnx_import, or the fuzz target's input); onnx_path names it in
 * messages and in the model file's first comment. */
int dl_onnx_import_buffer(const void *buf, size_t size, const char *onnx_path,
			  const char *yaml_path, struct dl_error *err);

struct Onnx__TensorProto;

/* Element i of the TensorProto t, from its raw_data or from its typed
 * field: *d always, and *k exactly for the integer types (int64, int32,
 * int8, uint8, bool). The caller has checked that t holds more than i
 * elements. 0, or -1 (nothing set) for an element type it does not read.
 * One reader for import's constants and tests/onnx2npy. */
int dl_onnx_tensor_elem(const struct Onnx__TensorProto *t, size_t i,
			double *d, int64_t *k);

#endif
