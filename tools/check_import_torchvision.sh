#!/bin/sh
# The Done-when check of `dlrun import` (issue 10): torchvision's resnet18,
# mobilenet_v2 and efficientnet_b0 with random weights (fixed seed),
# exported by torch.onnx.export (opset 17, dynamic batch), imported, run by
# `dlrun infer` on a batch of 2, and compared with PyTorch's output within
# 1e-4 relative (tests/npycmp). The files are too large to commit, so they
# are made here in a temporary directory.
#
# Usage: tools/check_import_torchvision.sh [MODEL...]   (from a built tree;
# `make check` runs it as tests/import_torchvision.sh)
# Needs Debian's python3-torch and python3-torchvision (/usr/bin/python3).
# mobilenet_v2 needs a dlrun with the relu6 op (ONNX Clip(0, 6)).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
DLRUN=${DLRUN:-$top/src/dlrun}
NPYCMP=${NPYCMP:-$top/tests/npycmp}
PYTHON=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlrun-tv.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
[ $# -gt 0 ] || set -- resnet18 mobilenet_v2 efficientnet_b0

failed=0
for m in "$@"; do
	"$PYTHON" - "$m" "$tmp" <<'PY' 2>"$tmp/$m.export.log" || {
import io, sys
import numpy as np
import torch
import torchvision

name, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
model = getattr(torchvision.models, name)(weights=None).eval()
g = torch.Generator().manual_seed(1)
with torch.no_grad():
    # batch-norm statistics that are not the identity
    for mod in model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.copy_(torch.randn(mod.num_features, generator=g) * 0.1)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
x = torch.randn(2, 3, 224, 224, generator=g)
torch.onnx.export(model, x, f"{out}/{name}.onnx", opset_version=17,
                  input_names=["x"], output_names=["y"],
                  dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
with torch.no_grad():
    y = model.double()(x.double()).float()
np.save(f"{out}/{name}-input.npy", x.numpy())
np.save(f"{out}/{name}-expected.npy", y.numpy())
PY
		echo "$m: export failed: $(tail -n 1 "$tmp/$m.export.log")"
		failed=1
		continue
	}
	if ! "$DLRUN" import "$tmp/$m.onnx" -o "$tmp/$m.yaml" 2>"$tmp/err"; then
		echo "$m: import failed: $(cat "$tmp/err")"
		failed=1
		continue
	fi
	if ! "$DLRUN" infer "$tmp/$m.yaml" <"$tmp/$m-input.npy" >"$tmp/$m-out.npy" 2>"$tmp/err"; then
		echo "$m: infer failed: $(cat "$tmp/err")"
		failed=1
		continue
	fi
	if r=$("$NPYCMP" "$tmp/$m-out.npy" "$tmp/$m-expected.npy" 1e-4 2>&1); then
		echo "$m: ok ($(grep -c '^  - name:' "$tmp/$m.yaml") entries; $r)"
	else
		echo "$m: FAILED: $r"
		failed=1
	fi
done
exit $failed
