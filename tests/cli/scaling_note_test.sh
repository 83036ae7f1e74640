#!/usr/bin/env bash
# scripts/scaling_note.md from its "Assumed:" line on is what scripts/scaling_note.lua prints
# (trailing blank lines aside): a change to the model must regenerate the note, and an edit by
# hand to its tables fails here. Usage: scaling_note_test.sh path/to/bvlua
set -u
BVLUA=${1:?usage: scaling_note_test.sh path/to/bvlua}
out=$("$BVLUA" run scripts/scaling_note.lua) || { echo "FAIL: scaling_note.lua exited $?"; exit 1; }
note=$(sed -n '/^Assumed: /,$p' scripts/scaling_note.md)
[ -n "$note" ] || { echo "FAIL: scripts/scaling_note.md has no 'Assumed:' line"; exit 1; }
if [ "$out" != "$note" ]; then
  echo "FAIL: scripts/scaling_note.md differs from scripts/scaling_note.lua's output; regenerate it:"
  diff <(printf '%s\n' "$note") <(printf '%s\n' "$out") | head -40
  exit 1
fi
# The goals' table is there, and every planned change has a row.
for want in "Issue 34's goals" "| (a) hybrid mesh |" "| (b) bf16 on the wire |" \
            "| (c) no second broadcast |" "| (d) all-reduce during the backward |" \
            "| (a) + (b) + (c) |" "| (b) + (d) |"; do
  grep -qF -- "$want" <<<"$out" || { echo "FAIL: the note has no '$want'"; exit 1; }
done
echo "ok: scripts/scaling_note.md matches scripts/scaling_note.lua"
