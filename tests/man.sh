#!/bin/sh
# The man pages, printing TAP: both pass `mandoc -Tlint` with nothing worse
# than STYLE messages; every op that `dlrun ops` lists has an `.It Ic OP`
# entry in the OPS section of man/dlrun-model.5 that covers each of its
# hyperparameters (with the default `dlrun ops` shows, or "required"), and
# that section documents no op the binary does not have; every verb of
# `dlrun --help` has its `.Ss dlrun VERB` subsection in man/dlrun.1, which
# documents every option of `dlrun VERB --help`; neither page calls an op or
# a verb that exists "not yet implemented"; every page under man/, rendered
# by mandoc -Tascii and by man (when man-db and groff are installed), shows
# no prose as a function's arguments and no quote nested in a quote.
#
# Environment: see tests/lib.sh; MANDOC (set by make check from configure;
# empty: the lint tests are skipped; unset: mandoc from PATH).

# shellcheck source=tests/lib.sh
. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

page1=$srcdir/man/dlrun.1
page5=$srcdir/man/dlrun-model.5
if [ -z "${MANDOC+set}" ]; then
	MANDOC=$(command -v mandoc 2>/dev/null)
fi

# ---- mandoc -Tlint ----

# lint_clean PAGE: mandoc -Tlint reports nothing but STYLE messages. Its
# messages go to stdout; stderr only carries notes about the system's
# manual database (such as "outdated mandoc.db"), which say nothing about
# the page.
lint_clean() {
	[ -r "$1" ] || {
		fail "$1 is missing"
		return 1
	}
	"$MANDOC" -Tlint "$1" >"$tmp/lint" 2>"$tmp/lint.err"
	lint_rc=$?
	if [ "$lint_rc" -gt 4 ]; then
		fail "mandoc -Tlint $1 exited $lint_rc"
		sed 's/^/  /' "$tmp/lint.err" >>"$tmp/diag"
	fi
	if grep -v ' STYLE: ' "$tmp/lint" >"$tmp/lint.bad"; then
		fail "mandoc -Tlint $1 warns:"
		sed 's/^/  /' "$tmp/lint.bad" >>"$tmp/diag"
	fi
	[ ! -s "$tmp/diag" ]
}

for page in "$page1" "$page5"; do
	name=man/$(basename "$page")
	if [ -n "$MANDOC" ] && [ -x "$MANDOC" ]; then
		check "mandoc -Tlint $name: no warnings (STYLE aside)" lint_clean "$page"
	else
		skip "mandoc -Tlint $name: no warnings (STYLE aside)" "no mandoc"
	fi
done

# ---- sections of the pages ----

# section PAGE TITLE: the lines of section .Sh TITLE of PAGE
section() {
	awk -v t=".Sh $2" '
		/^\.Sh / { on = ($0 == t) }
		on' "$1"
}

# subsection PAGE TITLE: the lines of subsection .Ss TITLE of PAGE (up to
# the next .Ss or .Sh)
subsection() {
	awk -v t=".Ss $2" '
		/^\.S[sh] / { on = ($0 == t) }
		on' "$1"
}

section "$page5" OPS >"$tmp/ops.man"
subsection "$page5" "Not yet implemented" >"$tmp/ops.later"
subsection "$page1" "Not yet implemented" >"$tmp/verbs.later"

# has_word FILE WORD: a line of FILE holds WORD as a whole word
has_word() {
	grep -Fw -e "$2" "$1" >/dev/null
}

# ---- ops ----

"$DLRUN" ops >"$tmp/ops.list" 2>"$tmp/ops.err"
ops_rc=$?

# op_block OP: the OPS section's entry for OP, from its `.It Ic` line to
# the next `.It Ic` line or subsection, in $tmp/block
op_block() {
	awk -v op="$1" '
		function names(line,   i, n, w) {
			n = split(line, w, /[ ,]+/)
			for (i = 3; i <= n; i++)
				if (w[i] == op)
					return 1
			return 0
		}
		/^\.It Ic / { on = names($0); if (on) { print; next } }
		/^\.S[sh] / { on = 0 }
		on' "$tmp/ops.man" >"$tmp/block"
}

# hp_item NAME: the text of the `.It Va ... NAME ...` item of $tmp/block,
# up to the next .It or .El, in $tmp/item; fails when there is none
hp_item() {
	awk -v hp="$1" '
		function names(line,   i, n, w) {
			n = split(line, w, /[ ,]+/)
			for (i = 3; i <= n; i++)
				if (w[i] == hp)
					return 1
			return 0
		}
		/^\.(It|El)/ { on = 0 }
		/^\.It Va / && names($0) { on = 1; found = 1 }
		on
		END { exit !found }' "$tmp/block" >"$tmp/item"
}

# item_value: the first word of the item's text in $tmp/item (after the
# `.It Va` line; a leading macro such as .Li or .Cm skipped, trailing
# punctuation dropped): the page's convention is that it is the default,
# or "required", or "inferred"
item_value() {
	awk 'NR == 2 {
		w = ($1 ~ /^\./) ? $2 : $1
		sub(/[,;:]+$/, "", w)
		print w
	}' "$tmp/item"
}

# op_documented OP SPEC...: OP has an entry, and each hyperparameter SPEC
# ("name=default", or "name" when required) an item there that starts
# with its default (or "required"), or is named in a list of shared ones
# (".Va a , b , name", as "those of conv1d")
op_documented() {
	op=$1
	shift
	op_block "$op"
	if [ ! -s "$tmp/block" ]; then
		fail "no '.It Ic $op' entry in the OPS section of man/dlrun-model.5"
		return 1
	fi
	for spec in "$@"; do
		hp=${spec%%=*}
		if hp_item "$hp"; then
			case $spec in
			*=*) want=${spec#*=} ;;
			*) want=required ;;
			esac
			got=$(item_value)
			[ "$got" = "$want" ] ||
				fail "$op: the item for $hp starts with '$got', expected its default '$want'"
		elif ! grep -E "^\\.Va .* , " "$tmp/block" | grep -Fw -e "$hp" >/dev/null; then
			fail "$op: hyperparameter $hp has no '.It Va $hp' item"
		fi
	done
	has_word "$tmp/ops.later" "$op" &&
		fail "$op is listed under 'Not yet implemented'"
	[ ! -s "$tmp/diag" ]
}

# no_extra_ops: every `.It Ic` op of the OPS section is one dlrun lists
no_extra_ops() {
	awk '/^\.It Ic / {
		n = split($0, w, /[ ,]+/)
		for (i = 3; i <= n; i++)
			if (w[i] != "Ic")
				print w[i]
	}' "$tmp/ops.man" >"$tmp/ops.documented"
	while read -r op; do
		awk -v op="$op" '$1 == op { found = 1 } END { exit !found }' \
			"$tmp/ops.list" || fail "man/dlrun-model.5 documents '$op', which dlrun ops does not list"
	done <"$tmp/ops.documented"
	[ -s "$tmp/ops.documented" ] || fail "no '.It Ic' entries in the OPS section"
	[ ! -s "$tmp/diag" ]
}

if [ "$ops_rc" -ne 0 ] || [ ! -s "$tmp/ops.list" ]; then
	ok 1 "dlrun ops lists the ops"
	diag "dlrun ops exited $ops_rc"
	diag_file "$tmp/ops.err"
else
	while read -r line; do
		# word splitting of the line into op and hyperparameters is intended
		# shellcheck disable=SC2086
		set -- $line
		check "man/dlrun-model.5 documents op $1 and its hyperparameters" \
			op_documented "$@"
	done <"$tmp/ops.list"
	check "man/dlrun-model.5 documents no op that dlrun ops does not list" no_extra_ops
fi

# ---- verbs and their options ----

"$DLRUN" --help >"$tmp/help" 2>&1
help_rc=$?
awk '/^verbs:/ { on = 1; next } on && /^  [a-z]/ { print $1 } on && /^$/ { on = 0 }' \
	"$tmp/help" >"$tmp/verbs"

# verb_documented VERB: dlrun(1) has `.Cm VERB` in its SYNOPSIS and a
# `.Ss dlrun VERB` subsection that names every option of `dlrun VERB --help`
verb_documented() {
	v=$1
	section "$page1" SYNOPSIS | grep -E "^\\.Cm $v\$" >/dev/null ||
		fail "no '.Cm $v' in the SYNOPSIS of man/dlrun.1"
	subsection "$page1" "dlrun $v" >"$tmp/block"
	if [ ! -s "$tmp/block" ]; then
		fail "no '.Ss dlrun $v' subsection in man/dlrun.1"
		return 1
	fi
	"$DLRUN" "$v" --help >"$tmp/vhelp" 2>&1 || fail "dlrun $v --help failed"
	# long options, then short ones, without -h/--help (documented once);
	# options are single words
	# shellcheck disable=SC2013
	for opt in $(grep -oE -- '--[a-z][a-z0-9-]*' "$tmp/vhelp" | sort -u); do
		[ "$opt" = --help ] && continue
		grep -E "(^|[ ])Fl ${opt#-}( |\$)" "$tmp/block" >/dev/null ||
			fail "'dlrun $v' option $opt is not in its subsection of man/dlrun.1"
	done
	# shellcheck disable=SC2013
	for opt in $(grep -oE -- '(^|[ ,|(])-[a-zA-Z]([ ,]|$)' "$tmp/vhelp" |
		tr -d ' ,|(' | sort -u); do
		[ "$opt" = -h ] && continue
		grep -E "(^|[ ])Fl ${opt#-}( |\$)" "$tmp/block" >/dev/null ||
			fail "'dlrun $v' option $opt is not in its subsection of man/dlrun.1"
	done
	has_word "$tmp/verbs.later" "$v" &&
		fail "$v is listed under 'Not yet implemented'"
	[ ! -s "$tmp/diag" ]
}

if [ "$help_rc" -ne 0 ] || [ ! -s "$tmp/verbs" ]; then
	ok 1 "dlrun --help lists the verbs"
	diag "dlrun --help exited $help_rc"
	diag_file "$tmp/help"
else
	while read -r v; do
		check "man/dlrun.1 documents verb $v and its options" verb_documented "$v"
	done <"$tmp/verbs"
fi

global_options() {
	for opt in -version -help; do
		grep -E "^\\.Fl $opt\$" "$page1" >/dev/null ||
			fail "no '.Fl $opt' line in the SYNOPSIS of man/dlrun.1"
	done
	[ ! -s "$tmp/diag" ]
}
check "man/dlrun.1 documents --version and --help" global_options

# ---- markup rendered as code where prose was meant ----

# A function set with arguments renders as a prototype: its name in bold,
# then "(", its arguments in italics, ")". mdoc's .Fn and .Fo take every
# word that follows as an argument, so prose after a function's name came
# out as `state_dict(lists, a, tied, tensor, under, both, names)`. The
# rule, on the rendered text (so that it holds for any renderer): every
# argument of a rendered prototype is a C parameter declaration (a type and
# a name, `void` or `...`); prose that mentions a call uses .Ql or .Li.
# And a quote never opens inside another (.Qq nested on one line came out
# as `("sgd, "adam (default), "adamw""")`): no two double quotes in a row.
bs=$(printf '\b')
b1=$(printf '\001')
i1=$(printf '\003')

# rendered_artefacts FILE: FILE holds a page rendered with overstrikes
# (nroff's bold and italics); prints each prototype whose arguments are not
# declarations, and each doubled quote, one per line
rendered_artefacts() {
	# bold chars X^HX get \001 before them, italic _^HX get \003; lines
	# joined, so that a prototype broken over lines is seen whole
	LC_ALL=C sed -e "s/\(.\)$bs\1/$b1\1/g" -e "s/_$bs\(.\)/$i1\1/g" "$1" |
		LC_ALL=C tr '\n' ' ' | LC_ALL=C tr -s ' ' >"$1.marked"
	LC_ALL=C grep -o "\(${b1}[A-Za-z0-9_.:]\)\{1,\}(${i1}[^)]*)" "$1.marked" |
		LC_ALL=C tr -d "$b1$i1" |
		LC_ALL=C awk '{
			args = $0
			sub(/^[^(]*\(/, "", args)
			sub(/\)$/, "", args)
			n = split(args, a, /, */)
			for (k = 1; k <= n; k++) {
				v = a[k]
				sub(/^ +/, "", v)
				sub(/ +$/, "", v)
				if (v == "void" || v == "...")
					continue
				if (v !~ /^[A-Za-z_][A-Za-z0-9_]*( +[A-Za-z_][A-Za-z0-9_]*)* *[* ] *\**[A-Za-z_][A-Za-z0-9_]*(\[\])?$/) {
					print "prototype with prose as arguments: " $0
					next
				}
			}
		}'
	LC_ALL=C tr -d "$b1$i1" <"$1.marked" | LC_ALL=C grep -o '.\{0,30\}"".\{0,10\}' |
		sed 's/^/doubled quote: /'
}

# markup_clean RENDERER PAGE: PAGE rendered by RENDERER (mandoc or man)
# has none of rendered_artefacts
markup_clean() {
	if [ "$1" = mandoc ]; then
		LC_ALL=C "$MANDOC" -Tascii "$2" >"$tmp/page" 2>/dev/null
	else
		LC_ALL=C MANWIDTH=200 MAN_KEEP_FORMATTING=1 man -l "$2" >"$tmp/page" 2>/dev/null
	fi || {
		fail "$1 could not render $2"
		return 1
	}
	[ -s "$tmp/page" ] || {
		fail "$1 rendered $2 empty"
		return 1
	}
	rendered_artefacts "$tmp/page" >"$tmp/artefacts"
	if [ -s "$tmp/artefacts" ]; then
		fail "$1 renders markup artefacts in $2:"
		sed 's/^/  /' "$tmp/artefacts" >>"$tmp/diag"
	fi
	[ ! -s "$tmp/artefacts" ]
}

# the checker itself on a page made to fail: prose after .Fn, nested .Qq
t_artefacts_found() {
	printf '%s\n' '.Dd January 1, 2026' '.Dt T 1' '.Os' '.Sh NAME' '.Nm t' \
		'.Nd t' '.Sh DESCRIPTION' '.Fn state_dict lists a tied tensor' \
		'.Fn dlrun_open "dlrun_model **m" "int n"' \
		'.Pq Qq sgd , Qq adam' >"$tmp/bad.1"
	LC_ALL=C "$MANDOC" -Tascii "$tmp/bad.1" >"$tmp/bad.txt" 2>/dev/null
	rendered_artefacts "$tmp/bad.txt" >"$tmp/bad.found"
	grep -F 'state_dict(lists, a, tied, tensor)' "$tmp/bad.found" >/dev/null ||
		fail "the prose after .Fn was not found: $(cat "$tmp/bad.found")"
	grep -F 'dlrun_open' "$tmp/bad.found" >/dev/null &&
		fail "a prototype was taken for prose"
	grep -F 'doubled quote' "$tmp/bad.found" >/dev/null ||
		fail "the nested quotes were not found"
	[ "$(wc -l <"$tmp/bad.found")" -eq 2 ] ||
		fail "expected 2 findings: $(cat "$tmp/bad.found")"
}

if [ -n "$MANDOC" ] && [ -x "$MANDOC" ]; then
	check "the markup checker finds prose after .Fn and nested quotes" t_artefacts_found
fi
for page in "$srcdir"/man/*.[1-9]; do
	name=man/$(basename "$page")
	if [ -n "$MANDOC" ] && [ -x "$MANDOC" ]; then
		check "mandoc -Tascii $name: no prose rendered as a prototype, no nested quotes" \
			markup_clean mandoc "$page"
	else
		skip "mandoc -Tascii $name: no prose rendered as a prototype, no nested quotes" "no mandoc"
	fi
	if command -v man >/dev/null 2>&1 && command -v nroff >/dev/null 2>&1; then
		check "man $name: no prose rendered as a prototype, no nested quotes" \
			markup_clean man "$page"
	else
		skip "man $name: no prose rendered as a prototype, no nested quotes" \
			"man or nroff (man-db, groff) not installed"
	fi
done

done_testing
