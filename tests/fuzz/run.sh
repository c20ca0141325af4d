#!/bin/sh
# make fuzz: builds each libFuzzer target with clang (ASan, UBSan), apart
# from the normal build, into $BUILD (default tests/fuzz/build under the
# build directory), then runs each for FUZZ_SECONDS (default 60) on a copy
# of its seed corpus with its dictionary, one after another. Targets: model
# npy text safetensors npz infer, onnx when the build has ONNX import and
# image when it decodes PNG or JPEG (or those named in FUZZ_TARGETS).
# Crashes are left as
# $BUILD/<target>/crash-* etc. FUZZ_RUNS, if set, also ends each run after
# that many executions (whichever comes first); FUZZ_TIMEOUT (seconds,
# default 5) is the wall time after which an input counts as a hang.
#
# Usage: sh tests/fuzz/run.sh [SRCDIR]   (from the build directory)
set -e
src=${1:-$(dirname "$0")/../..}
src=$(cd "$src" && pwd)
: "${CLANG:=clang}"
: "${FUZZ_SECONDS:=60}"
: "${FUZZ_RUNS:=-1}"
# libFuzzer's timeout is wall time: on a loaded machine at nice 19 raise it
# (FUZZ_TIMEOUT) and read the slow units it reports (over 1 s) instead
: "${FUZZ_TIMEOUT:=5}"
# ONNX import: onnx.c and the parser protoc-c generated into the build tree
onnx=
if grep -q '^#define HAVE_ONNX_IMPORT 1' config.h 2>/dev/null; then
	onnx=onnx
fi
# MPI (data-parallel training), when the build has it
mpi=
if grep -q '^#define HAVE_MPI 1' config.h 2>/dev/null; then
	mpi=ompi-c
fi
# images (PNG, JPEG), when the build decodes them
image=
img_libs=
if grep -q '^#define HAVE_PNG 1' config.h 2>/dev/null; then
	image=image
	img_libs="$(pkg-config --libs libpng)"
fi
if grep -q '^#define HAVE_JPEG 1' config.h 2>/dev/null; then
	image=image
	img_libs="$img_libs -ljpeg"
fi
: "${FUZZ_TARGETS:=model npy text safetensors npz infer csv vocab $onnx $image}"
: "${BUILD:=$(pwd)/tests/fuzz/build}"
mkdir -p "$BUILD/obj"
flags="-g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined
-fno-sanitize-recover=undefined -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE
-DHAVE_CONFIG_H -I$(pwd) -I$src/src -I$src/tests/fuzz -fopenmp=libgomp
$(pkg-config --cflags yaml-0.1 jansson zlib $mpi ${image:+libpng} 2>/dev/null) -I/usr/include/x86_64-linux-gnu/openblas-pthread/"
libs="${onnx:+-lprotobuf-c }${mpi:+$(pkg-config --libs $mpi) }$img_libs -lyaml -ljansson -lz -L/usr/lib/x86_64-linux-gnu/openblas-pthread/ -lopenblas -lgomp -lm"
objs=
# the newest header: an object older than it is rebuilt too (a struct that
# changed size in a header left stale objects reading past it)
# shellcheck disable=SC2012
newest_h=$(ls -t "$src"/src/*.h "$src"/src/*/*.h config.h 2>/dev/null | head -n 1)
# compile SOURCE: into $BUILD/obj unless up to date, appended to $objs
compile() {
	o=$BUILD/obj/$(echo "${1#*/src/}" | tr / _ | sed 's/\.c$/.o/')
	if [ ! -f "$o" ] || [ "$1" -nt "$o" ] || { [ -n "$newest_h" ] && [ "$newest_h" -nt "$o" ]; }; then
		# shellcheck disable=SC2086
		$CLANG $flags ${onnx:+$(pkg-config --cflags libprotobuf-c 2>/dev/null) -I$(pwd)/src} \
			-c "$1" -o "$o"
	fi
	objs="$objs $o"
}
for c in "$src"/src/*/*.c; do
	case $c in
	*.pb-c.c) ;;   # generated: the build tree's, below
	*/src/import/*) [ -z "$onnx" ] || compile "$c" ;;
	*) compile "$c" ;;
	esac
done
[ -z "$onnx" ] || compile "$(pwd)/src/import/onnx.pb-c.c"
for t in $FUZZ_TARGETS; do
	# shellcheck disable=SC2086
	$CLANG $flags -fsanitize=fuzzer "$src/tests/fuzz/fuzz_$t.c" $objs $libs \
		-o "$BUILD/fuzz_$t"
done
[ "$FUZZ_SECONDS" -gt 0 ] || exit 0
status=0
for t in $FUZZ_TARGETS; do
	mkdir -p "$BUILD/$t/corpus"
	cp "$src/tests/fuzz/corpus/$t/"* "$BUILD/$t/corpus/" 2>/dev/null || true
	echo "== fuzz_$t: $FUZZ_SECONDS s"
	# a whole verb run per input: shorter inputs, more of them
	case $t in
	infer) max_len=8192 ;;
	*) max_len=65536 ;;
	esac
	(cd "$BUILD/$t" && ASAN_OPTIONS=detect_leaks=1 "$BUILD/fuzz_$t" -max_total_time="$FUZZ_SECONDS" \
		-runs="$FUZZ_RUNS" -timeout="$FUZZ_TIMEOUT" -report_slow_units=1 -rss_limit_mb=2048 -max_len=$max_len -print_final_stats=1 \
		-dict="$src/tests/fuzz/$t.dict" corpus) || status=1
done
exit $status
