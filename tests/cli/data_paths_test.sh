#!/usr/bin/env bash
# `bvlua train` run from another directory than the one a config's relative data path is
# relative to: the error names the path, the config key, the current directory, and (the lines
# data set) the command that draws it. A lines config's prepare refuses to draw outside the
# current directory. Usage: data_paths_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: data_paths_test.sh path/to/bvlua}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; cat "$TMP/out" 2>/dev/null; exit 1; }

cat >"$TMP/rel.lua" <<'LUA'
return {get_config = function()
  return {input = {data = {name = "bv:jsonl", fname = "data/lines/train.jsonl",
                           fopen_keys = {image = "data/lines"}}, batch_size = 4,
                   pp = 'decode|value_range(-1, 1)|onehot(3, key="label", key_result="labels")'},
          num_classes = 3, total_steps = 2, log_training_steps = 1, lr = 1e-3,
          optax_name = "scale_by_adam", model_name = "bit", model = {depth = 26, width = 0.5}}
end}
LUA
mkdir "$TMP/elsewhere"
cd "$TMP/elsewhere" || fail "cd"
"$BVLUA" train "$TMP/rel.lua" --workdir "$TMP/w" >"$TMP/out" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "exit code $rc, want 1"
grep -qF "bv:jsonl: no such file 'data/lines/train.jsonl' (input.data.fname): a relative path is relative to the current directory, $TMP/elsewhere; run bvlua from the directory it is relative to, or give an absolute path. To draw the lines data set there: bvlua run $ROOT/scripts/make_lines.lua data/lines" "$TMP/out" \
  || fail "the message"
grep -q "cannot open" "$TMP/out" && fail "the old message"
# From the source root the script is named as the README writes it.
cd "$ROOT" || fail "cd root"
"$BVLUA" -e "print(require('bv.lines').how_to_make('x/lines/val.jsonl'))" >"$TMP/out" 2>&1
grep -qx "bvlua run scripts/make_lines.lua x/lines" "$TMP/out" || fail "the relative script"
# A lines config's prepare draws only below the current directory: data=/nonexistent/lines (a
# typo, say) is refused with nothing made, naming the directory and BV_LINES_ANYWHERE; with it,
# the drawing is said first (into a directory that cannot be made, so that it fails at once).
cd "$TMP/elsewhere" || fail "cd elsewhere"
"$BVLUA" train "$ROOT/configs/lines/resnet.lua:runlocal,data=/nonexistent/lines" --workdir w \
  >"$TMP/out" 2>&1
[ $? -eq 1 ] || fail "outside: exit code"
grep -qF "bv.lines: refusing to draw the lines data set (12,000 images, 49 MB) into /nonexistent/lines (input.data.fname: /nonexistent/lines/train.jsonl), outside the current directory $TMP/elsewhere: is the path mistyped? To draw it there, run bvlua run $ROOT/scripts/make_lines.lua /nonexistent/lines, or set BV_LINES_ANYWHERE=1 and train again" "$TMP/out" \
  || fail "the refusal"
[ ! -e /nonexistent ] || fail "/nonexistent was made"
[ -z "$(ls -A)" ] || fail "the refused run left files: $(ls -A)"
BV_LINES_ANYWHERE=1 "$BVLUA" train "$ROOT/configs/lines/resnet.lua:runlocal,data=/proc/bvlua_none/lines" \
  --workdir w >"$TMP/out" 2>&1
[ $? -eq 1 ] || fail "BV_LINES_ANYWHERE=1: exit code"
grep -qF "bv.lines: drawing the lines data set (12,000 images, 49 MB) into /proc/bvlua_none/lines" \
  "$TMP/out" || fail "BV_LINES_ANYWHERE=1: the drawing is not said"
grep -qF "bv.lines: could not make /proc/bvlua_none/lines" "$TMP/out" || fail "the failed drawing"
# Below the current directory is judged by the directory, not its spelling: in a directory
# entered through a symbolic link ($PWD is the link, bv.fs.cwd() the real directory), both
# spellings of a path below it are drawn into; with the current directory /, an absolute path is
# below it. (--dry-run: said, nothing drawn.)
mkdir "$TMP/real" && ln -s "$TMP/real" "$TMP/link" || fail "the link"
cd "$TMP/link" || fail "cd link"
for dir in "$TMP/link/data/lines" "$TMP/real/data/lines"; do
  "$BVLUA" train "$ROOT/configs/lines/resnet.lua:runlocal,data=$dir" --dry-run >"$TMP/out" 2>&1
  [ $? -eq 0 ] || fail "in a symlinked directory, data=$dir: exit code"
  grep -qF "bvlua train draws the lines data set (12,000 images, 49 MB) into $dir first" \
    "$TMP/out" || fail "in a symlinked directory, data=$dir is not drawn"
done
cd / || fail "cd /"
"$BVLUA" train "$ROOT/configs/lines/resnet.lua:runlocal,data=$TMP/root_lines" --dry-run \
  >"$TMP/out" 2>&1
[ $? -eq 0 ] || fail "in /: exit code"
grep -qF "into $TMP/root_lines first" "$TMP/out" || fail "in /, an absolute path is refused"
[ -z "$(ls -A "$TMP/real")" ] && [ ! -e "$TMP/root_lines" ] || fail "a dry run drew"
echo OK
