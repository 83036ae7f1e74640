#!/usr/bin/env bash
# README.md leads a newcomer (issue 32): Set-up (with the main job) first, then the GPU tutorial's
# walk, then "Using it", with the long Reference after them; its Set-up names every Debian
# package scripts/setup installs (libcairo2-dev and libjemalloc-dev among them); the Training
# section documents `bvlua train CONFIG --dry-run`. (The tutorial's runlocal lines themselves
# are run by lines_configs_test.sh.) Usage: readme_test.sh path/to/bvlua (unused)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$ROOT/tests/cli/checks.sh"
README=$ROOT/README.md
: >"$TMP/out"
: >"$TMP/err"

# section TITLE: the lines of README's "## TITLE" or "### TITLE" section, up to the next heading
# of the same level or above.
section() {
  awk -v t="$1" '
    /^#+ / { lvl = index($0, " ") - 1
             if (on && lvl <= start) exit
             if (substr($0, lvl + 2) == t) { on = 1; start = lvl } }
    on' "$README"
}
line_of() { grep -n -m 1 -x -F -- "$1" "$README" | cut -d: -f1; }

# The order: set-up, the tutorial, using it, the reference.
setup=$(line_of "## Set-up (Debian bookworm)")
tutorial=$(line_of "## The GPU tutorial, in bvlua")
using=$(line_of "## Using it")
reference=$(line_of "## Reference")
in_order() {  # in_order N1 N2 ...: line numbers, each there and after the one before
  local prev=0 n
  for n in "$@"; do
    [ -n "$n" ] && [ "$n" -gt "$prev" ] || return 1
    prev=$n
  done
}
check "set-up, then the tutorial, then using it, then the reference (lines $setup, $tutorial, $using, $reference)" \
  in_order "$setup" "$tutorial" "$using" "$reference"
section "Set-up (Debian bookworm)" >"$TMP/setup"
check "set-up runs the main job" grep -qF "build/bvlua train configs/bit_lines.lua:quick" "$TMP/setup"

# Every package of scripts/setup's list is in the README's set-up.
sed -n '/^PACKAGES=(/,/^)/p' "$ROOT/scripts/setup" | sed 's/#.*//; s/PACKAGES=(//; s/)//' \
  | tr -s ' \t' '\n\n' | grep -v '^$' >"$TMP/packages"
check "scripts/setup's package list was read ($(wc -l <"$TMP/packages") packages)" \
  [ "$(wc -l <"$TMP/packages")" -ge 10 ]
check "libcairo2-dev is in scripts/setup's list" grep -qx libcairo2-dev "$TMP/packages"
check "libjemalloc-dev is in scripts/setup's list" grep -qx libjemalloc-dev "$TMP/packages"
# The set-up's text with its line breaks as spaces, so that a name is found across a wrap.
tr '\n' ' ' <"$TMP/setup" >"$TMP/setup_flat"
while read -r p; do
  re=$(printf '%s' "$p" | sed 's/[.+]/\\&/g')
  check "the README's set-up names $p" grep -qE "(^|[ ,(])$re([ ,;)]|$)" "$TMP/setup_flat"
done <"$TMP/packages"

# --dry-run is documented where training is.
section "Training" >"$TMP/training"
check "the Training section documents --dry-run" \
  grep -qF 'bvlua train CONFIG --dry-run' "$TMP/training"
finish
