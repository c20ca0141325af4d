/* ONNX import: reads an ONNX model (protobuf-c code generated from the
 * system's onnx.proto at build time) and writes the equivalent dlrun model
 * file and its safetensors weights. Shape arithmetic that depends only on
 * static sizes is folded here; the batch dimension stays symbolic. */
#ifndef DL_IMPORT_ONNX_H
#define DL_IMPORT_ONNX_H

#include <stddef.h>

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

#endif
