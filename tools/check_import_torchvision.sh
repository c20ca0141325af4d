#!/bin/sh
# The Done-when check of `dlrun import` (issue 10): torchvision models with
# random weights (fixed seed), exported by torch.onnx.export (opset 17,
# dynamic batch), imported, run by `dlrun infer` on a batch of 2, and
# compared with PyTorch's output within 1e-4 relative (tests/npycmp). The
# files are too large to commit, so they are made here in a temporary
# directory. tools/import_sweep.py runs every torchvision classifier so.
#
# Usage: tools/check_import_torchvision.sh [MODEL[:SIZE]...]   (from a
# built tree; SIZE is the input's height and width, default 224; `make
# check` runs some as tests/import_torchvision.sh)
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
# one Python process exports them all (starting torch takes seconds); a
# model it cannot export leaves its .export.log and no .onnx
"$PYTHON" - "$tmp" "$top/tools" "$@" <<'PY' 2>"$tmp/export.log"
import sys, traceback
sys.path.insert(0, sys.argv[2])
from import_sweep import export   # the sweep's export: the same models and files

out = sys.argv[1]
for arg in sys.argv[3:]:
    name, _, size = arg.partition(":")
    try:
        export(name, int(size or 224), out)
    except Exception:
        with open(f"{out}/{name}.export.log", "w") as f:
            f.write(traceback.format_exc())
PY
for arg in "$@"; do
	m=${arg%%:*}
	size=224
	[ "$m" = "$arg" ] || size=${arg#*:}
	if [ ! -s "$tmp/$m-expected.npy" ]; then
		log=$tmp/$m.export.log
		[ -s "$log" ] || log=$tmp/export.log
		echo "$m $size: export failed: $(tail -n 1 "$log")"
		failed=1
		continue
	fi
	if ! "$DLRUN" import "$tmp/$m.onnx" -o "$tmp/$m.yaml" 2>"$tmp/err"; then
		echo "$m $size: import failed: $(cat "$tmp/err")"
		failed=1
		continue
	fi
	if ! "$DLRUN" infer "$tmp/$m.yaml" <"$tmp/$m-input.npy" >"$tmp/$m-out.npy" 2>"$tmp/err"; then
		echo "$m $size: infer failed: $(cat "$tmp/err")"
		failed=1
		continue
	fi
	if r=$("$NPYCMP" "$tmp/$m-out.npy" "$tmp/$m-expected.npy" 1e-4 2>&1); then
		echo "$m $size: ok ($(grep -c '^  - name:' "$tmp/$m.yaml") entries; $r)"
	else
		echo "$m $size: FAILED: $r"
		failed=1
	fi
done
exit $failed
