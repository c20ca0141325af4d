#!/bin/sh
# The Done-when check of dlrun import (issue 10), printing TAP: torchvision's
# resnet18, mobilenet_v2 and efficientnet_b0 (random weights, fixed seed)
# exported by torch.onnx.export at opset 17, imported, run by `dlrun infer`
# on a batch of 2 images of 224 x 224 and compared with PyTorch within 1e-4
# relative, by tools/check_import_torchvision.sh (the files are too large to
# commit). Skipped when $PYTHON (default /usr/bin/python3) lacks torch or
# torchvision (Debian: python3-torch, python3-torchvision) or dlrun was
# built without ONNX import.
#
# Environment: see tests/lib.sh; PYTHON.

. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

: "${PYTHON:=/usr/bin/python3}"
if ! "$DLRUN" --version 2>/dev/null | grep -F 'onnx import: yes' >/dev/null; then
	echo "1..0 # SKIP dlrun was built without ONNX import"
	exit 0
fi
if [ ! -x "$PYTHON" ] || ! "$PYTHON" -c 'import torch, torchvision, numpy' >/dev/null 2>&1; then
	echo "1..0 # SKIP $PYTHON lacks torch, torchvision or numpy (Debian: python3-torch, python3-torchvision)"
	exit 0
fi
if [ -z "$NPYCMP" ] || [ ! -x "$NPYCMP" ]; then
	echo "Bail out! tests/npycmp is needed (NPYCMP)"
	exit 1
fi

t_model() {
	DLRUN=$DLRUN NPYCMP=$NPYCMP PYTHON=$PYTHON TMPDIR=$tmp \
		sh "$srcdir/tools/check_import_torchvision.sh" "$1" >"$tmp/out" 2>&1 ||
		fail "$(cat "$tmp/out")"
	[ "${TEST_VERBOSE:-}" = yes ] && diag_file "$tmp/out"
	return 0
}
for m in resnet18 mobilenet_v2 efficientnet_b0; do
	check "torchvision $m: import, infer, within 1e-4 of PyTorch" t_model "$m"
done

done_testing
