#!/bin/sh
# make fuzz: builds each libFuzzer target with clang (ASan, UBSan), apart
# from the normal build, into $BUILD (default tests/fuzz/build under the
# build directory), then runs each for FUZZ_SECONDS (default 60) on a copy
# of its seed corpus with its dictionary, one after another. Targets: model
# npy text safetensors npz infer (or those named in FUZZ_TARGETS). Crashes
# are left as $BUILD/<target>/crash-* etc.
#
# Usage: sh tests/fuzz/run.sh [SRCDIR]   (from the build directory)
set -e
src=${1:-$(dirname "$0")/../..}
src=$(cd "$src" && pwd)
: "${CLANG:=clang}"
: "${FUZZ_SECONDS:=60}"
: "${FUZZ_TARGETS:=model npy text safetensors npz infer}"
: "${BUILD:=$(pwd)/tests/fuzz/build}"
mkdir -p "$BUILD/obj"
flags="-g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined
-fno-sanitize-recover=undefined -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE
-DHAVE_CONFIG_H -I$(pwd) -I$src/src -I$src/tests/fuzz -fopenmp=libgomp
$(pkg-config --cflags yaml-0.1 jansson zlib 2>/dev/null) -I/usr/include/x86_64-linux-gnu/openblas-pthread/"
libs="-lyaml -ljansson -lz -L/usr/lib/x86_64-linux-gnu/openblas-pthread/ -lopenblas -lgomp -lm"
objs=
for c in "$src"/src/*/*.c; do
	o=$BUILD/obj/$(echo "${c#"$src"/src/}" | tr / _ | sed 's/\.c$/.o/')
	if [ ! -f "$o" ] || [ "$c" -nt "$o" ]; then
		# shellcheck disable=SC2086
		$CLANG $flags -c "$c" -o "$o"
	fi
	objs="$objs $o"
done
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
	(cd "$BUILD/$t" && ASAN_OPTIONS=detect_leaks=1 "$BUILD/fuzz_$t" -max_total_time="$FUZZ_SECONDS" \
		-timeout=5 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
		-dict="$src/tests/fuzz/$t.dict" corpus) || status=1
done
exit $status
