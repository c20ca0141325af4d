#!/bin/sh
# The Done-when check of dlrun import (issue 10), printing TAP: torchvision's
# resnet18, mobilenet_v2 and efficientnet_b0 on a batch of 2 images of 224 x
# 224, and inception_v3 (75 x 75: Concat of 6), densenet121 (64 x 64: Concat
# of up to 25), convnext_tiny (64 x 64: layer scales as parameter
# entries) and the video classifier r3d_18 (4 frames of 32 x 32: 3-D
# convolutions, batch norms and pools), with random weights (fixed seed), exported by torch.onnx.export
# at opset 17, imported, run by `dlrun infer` and compared with PyTorch
# within 1e-4 relative, by tools/check_import_torchvision.sh (the files are
# too large to commit; one Python process exports them all, about 35 s in
# all on two cores). tools/import_sweep.py runs every torchvision
# classifier. Skipped when $PYTHON (default /usr/bin/python3) lacks torch or
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

models="resnet18 mobilenet_v2 efficientnet_b0 inception_v3:75 densenet121:64 convnext_tiny:64
r3d_18:32"
DLRUN=$DLRUN NPYCMP=$NPYCMP PYTHON=$PYTHON TMPDIR=$tmp \
	sh "$srcdir/tools/check_import_torchvision.sh" $models >"$tmp/out" 2>&1
t_model() {
	line=$(grep -e "^$1 $2: " "$tmp/out")
	[ -n "$line" ] || fail "no result for $1 at $2 x $2: $(tail -n 3 "$tmp/out")"
	case $line in
	*": ok ("*) ;;
	*) fail "$line" ;;
	esac
	[ "${TEST_VERBOSE:-}" = yes ] && diag "$line"
	return 0
}
for arg in $models; do
	m=${arg%%:*}
	size=224
	[ "$m" = "$arg" ] || size=${arg#*:}
	check "torchvision $m ($size x $size): import, infer, within 1e-4 of PyTorch" t_model "$m" "$size"
done

done_testing
