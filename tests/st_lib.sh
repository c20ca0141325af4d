# Reading safetensors files without Python, for the shell tests (sourced
# after tests/lib.sh): an index of the tensors, each as .npy, and a
# comparison of two files tensor by tensor with npycmp (NPYCMP).


# st_index FILE: one line per tensor of the safetensors FILE, sorted by name:
# "NAME DTYPE SHAPE BEGIN END" (SHAPE comma-separated, "-" for a scalar;
# BEGIN and END absolute byte offsets in FILE); fails on a malformed file
st_index() {
	_hl=$(od -An -tu1 -N8 "$1" | awk '{ for (i = 1; i <= NF; i++) {
		n += $i * m; m = (m ? m * 256 : 256) } } BEGIN { m = 1 }
		END { printf "%d\n", n }') || return 1
	[ -n "$_hl" ] && [ "$_hl" -gt 1 ] && [ "$_hl" -lt 100000000 ] || return 1
	tail -c +9 "$1" | head -c "$_hl" | awk -v base=$((8 + _hl)) '
	{ s = s $0 }
	END {
		while (match(s, /"[^"]*"[ \t\n]*:[ \t\n]*[{][^{}]*[}]/)) {
			e = substr(s, RSTART, RLENGTH)
			s = substr(s, RSTART + RLENGTH)
			k = e
			sub(/^"/, "", k)
			sub(/".*/, "", k)
			if (k == "__metadata__")
				continue
			if (!match(e, /"dtype"[ \t\n]*:[ \t\n]*"[A-Za-z0-9]*"/))
				exit 1
			t = substr(e, RSTART, RLENGTH)
			sub(/.*:[ \t\n]*"/, "", t)
			sub(/"$/, "", t)
			if (!match(e, /"shape"[ \t\n]*:[ \t\n]*\[[0-9, \t\n]*\]/))
				exit 1
			sh = substr(e, RSTART, RLENGTH)
			sub(/[^[]*\[/, "", sh)
			sub(/\]$/, "", sh)
			gsub(/[ \t\n]/, "", sh)
			if (sh == "")
				sh = "-"
			if (!match(e, /"data_offsets"[ \t\n]*:[ \t\n]*\[[ \t\n]*[0-9]+[ \t\n]*,[ \t\n]*[0-9]+[ \t\n]*\]/))
				exit 1
			o = substr(e, RSTART, RLENGTH)
			sub(/[^[]*\[/, "", o)
			sub(/\]$/, "", o)
			gsub(/[ \t\n]/, "", o)
			split(o, b, ",")
			printf "%s %s %s %d %d\n", k, t, sh, base + b[1], base + b[2]
			n++
		}
		exit n == 0
	}' | LC_ALL=C sort
}

# st_to_npys FILE OUT: every tensor of FILE (F32 only), sorted by name, as
# float32 .npy arrays back to back in OUT; the names, one a line, in
# OUT.keys; fails (with a message) on what it cannot read
st_to_npys() {
	st_index "$1" >"$2.index" || {
		fail "$1: cannot read its safetensors header"
		return 1
	}
	[ -s "$2.index" ] || {
		fail "$1: no tensors"
		return 1
	}
	: >"$2"
	: >"$2.keys"
	while read -r _k _t _s _b _e; do
		echo "$_k" >>"$2.keys"
		if [ "$_t" != F32 ]; then
			fail "$1: tensor '$_k' is $_t, expected F32"
			return 1
		fi
		case $_s in
		-) _tuple="()" ;;
		*,*) _tuple="($(echo "$_s" | sed 's/,/, /g'))" ;;
		*) _tuple="($_s,)" ;;
		esac
		{
			npy_header '<f4' "$_tuple"
			tail -c +$((_b + 1)) "$1" | head -c $((_e - _b))
		} >>"$2"
	done <"$2.index"
}

# same_tensors ACTUAL EXPECTED [WHAT]: the two safetensors files hold the
# same tensor names and every tensor agrees within 1e-5 (relative, inf
# norm); WHAT names EXPECTED in the message (default "PyTorch's")
same_tensors() {
	_what=${3:-"PyTorch's"}
	st_to_npys "$1" "$tmp/st_actual.npy" || return 1
	st_to_npys "$2" "$tmp/st_expected.npy" || return 1
	if ! cmp -s "$tmp/st_actual.npy.keys" "$tmp/st_expected.npy.keys"; then
		fail "tensor names differ: got [$(tr '\n' ' ' <"$tmp/st_actual.npy.keys")]," \
			"expected [$(tr '\n' ' ' <"$tmp/st_expected.npy.keys")]"
		return 1
	fi
	if ! "$NPYCMP" "$tmp/st_actual.npy" "$tmp/st_expected.npy" 1e-5 \
		>"$tmp/cmp" 2>&1; then
		# npycmp numbers the arrays from 0 in name order
		awk 'NR == FNR { k[NR - 1] = $0; next }
			/^array [0-9]+:/ { i = $2; sub(/:/, "", i); $2 = k[i] ":" }
			{ print }' "$tmp/st_expected.npy.keys" "$tmp/cmp" |
			grep -v ' ok$' >"$tmp/cmp.named"
		fail "weights differ from $_what:"
		sed 's/^/  /' "$tmp/cmp.named" >>"$tmp/diag"
		return 1
	fi
}

