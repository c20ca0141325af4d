#!/bin/sh
# make install, printing TAP: into a directory the dynamic linker searches
# it runs ldconfig, not into another prefix nor under DESTDIR (a fake
# ldconfig, which lists the prefix's lib as searched, records the calls:
# the system's cache is never touched); a program built against another
# prefix as README says (pkg-config, then an rpath) runs without
# LD_LIBRARY_PATH, and without either it does not find libdlrun.so.
#
# Environment: see tests/lib.sh; MAKE (default make), run from the build
# directory.

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

: "${MAKE:=make}"
# the outer make's jobserver and flags are not this one's
unset MAKEFLAGS MFLAGS MAKELEVEL
if [ ! -f Makefile ] || ! command -v pkg-config >/dev/null 2>&1; then
	skip "make install" "no Makefile here, or no pkg-config"
	done_testing
	exit 0
fi

cat >"$tmp/ldconfig" <<LD
#!/bin/sh
case "\$*" in
*-v*) echo "/lib: (from <builtin>:0)"; echo "$tmp/sys/lib: (from test.conf:1)" ;;
*) echo "ldconfig \$*" >>"$tmp/calls" ;;
esac
LD
chmod +x "$tmp/ldconfig"

# install PREFIX [DESTDIR]: make install there with the fake ldconfig
install_to() {
	: >"$tmp/calls"
	$MAKE install prefix="$1" DESTDIR="$2" LDCONFIG="$tmp/ldconfig" \
		>"$tmp/install.log" 2>&1 || {
		fail "make install prefix=$1 DESTDIR=$2 failed"
		sed -n '1,20s/^/  /p' "$tmp/install.log" >>"$tmp/diag"
		return 1
	}
}

t_searched() {
	install_to "$tmp/sys" || return 1
	[ "$(wc -l <"$tmp/calls")" -eq 1 ] ||
		fail "ldconfig ran $(wc -l <"$tmp/calls") times, expected once"
}
check "make install into a searched directory runs ldconfig" t_searched

t_prefix() {
	install_to "$tmp/pre" || return 1
	[ -s "$tmp/calls" ] && fail "ldconfig ran for a prefix the linker does not search"
	[ -f "$tmp/pre/lib/pkgconfig/dlrun.pc" ] || fail "no dlrun.pc under the prefix"
}
check "make install into another prefix does not run ldconfig" t_prefix

t_destdir() {
	install_to "$tmp/sys" "$tmp/stage" || return 1
	[ -s "$tmp/calls" ] && fail "ldconfig ran under DESTDIR"
	[ -f "$tmp/stage$tmp/sys/include/dlrun.h" ] || fail "nothing staged under DESTDIR"
}
check "make install under DESTDIR does not run ldconfig" t_destdir

# README's lines for a prefix: pkg-config with PKG_CONFIG_PATH, then
# LD_LIBRARY_PATH or an rpath (the prefix from t_prefix)
t_readme_prefix() {
	[ -f "$tmp/pre/lib/pkgconfig/dlrun.pc" ] || {
		fail "nothing installed in $tmp/pre"
		return 1
	}
	PKG_CONFIG_PATH=$tmp/pre/lib/pkgconfig
	export PKG_CONFIG_PATH
	# --define-prefix: dlrun.pc holds configure's prefix, and this one
	# came from `make install prefix=` (README's configure --prefix
	# writes it into dlrun.pc)
	pc="pkg-config --define-prefix"
	# a sanitizer build's library needs its runtime first in the program
	san=$(sed -n 's/^SANITIZE_FLAGS = //p' Makefile)
	# shellcheck disable=SC2046,SC2086
	${CC:-cc} $san "$srcdir/examples/embed.c" $($pc --cflags --libs dlrun) \
		-o "$tmp/embed" 2>"$tmp/cc.err" || {
		fail "the example does not build with pkg-config: $(head -3 "$tmp/cc.err")"
		return 1
	}
	# (unless the system has a libdlrun of its own)
	if ! { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } |
		grep 'libdlrun\.so' >/dev/null &&
		env -u LD_LIBRARY_PATH "$tmp/embed" "$srcdir/models/mlp.yaml" \
			"$srcdir/models/mlp-input.txt" >/dev/null 2>&1; then
		fail "ran without LD_LIBRARY_PATH or an rpath (README says it needs one)"
	fi
	LD_LIBRARY_PATH=$tmp/pre/lib "$tmp/embed" "$srcdir/models/mlp.yaml" \
		"$srcdir/models/mlp-input.txt" >/dev/null 2>"$tmp/run.err" ||
		fail "does not run with LD_LIBRARY_PATH: $(head -3 "$tmp/run.err")"
	# shellcheck disable=SC2046,SC2086
	${CC:-cc} $san "$srcdir/examples/embed.c" $($pc --cflags --libs dlrun) \
		-Wl,-rpath,"$($pc --variable=libdir dlrun)" -o "$tmp/embed-rpath" \
		2>"$tmp/cc.err" || {
		fail "the example does not build with an rpath: $(head -3 "$tmp/cc.err")"
		return 1
	}
	env -u LD_LIBRARY_PATH "$tmp/embed-rpath" "$srcdir/models/mlp.yaml" \
		"$srcdir/models/mlp-input.txt" >/dev/null 2>"$tmp/run.err" ||
		fail "does not run with an rpath: $(head -3 "$tmp/run.err")"
}
check "a program built against a prefix runs with LD_LIBRARY_PATH or an rpath (README)" t_readme_prefix

done_testing
