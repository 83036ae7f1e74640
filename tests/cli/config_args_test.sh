#!/usr/bin/env bash
# The config on the command line as tutorial readers write it: a Python config is refused with
# the Lua example to follow (named from any directory); 'x.lua:flip=true, crop=false' (quoted)
# sets both; unquoted, the shell's split is explained; a misspelt argument is quoted.
# Usage: config_args_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: config_args_test.sh path/to/bvlua}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; cat "$TMP/out" 2>/dev/null; exit 1; }

# A .py config, from another directory: the example and README are named by their full path.
printf 'import ml_collections\n' >"$TMP/x.py"
(cd "$TMP" && "$BVLUA" train x.py --dry-run) >"$TMP/out" 2>&1
[ $? -eq 1 ] || fail ".py exit code"
grep -qF "config: \"x.py\" is a Python config; bvlua's configs are Lua files. To translate one: $ROOT/configs/lines/resnet.lua is the GPU tutorial's lines_resnet.py in Lua, and the \"Configs\" section of $ROOT/README.md has a table of Python -> Lua" "$TMP/out" \
  || fail "the .py message"

cd "$ROOT" || fail "cd"
# Quoted, with a blank after the comma: both arguments take effect (no flips, no crop).
"$BVLUA" train "configs/lines/resnet.lua:runlocal, flip=false, crop=false" --dry-run \
  >"$TMP/out" 2>&1 || fail "the quoted arguments"
grep -q '"pp": "decode|resize(32)|value_range(-1, 1)|onehot' "$TMP/out" || fail "flip, crop off"
grep -q "flip_lr\|random_crop" "$TMP/out" && fail "an augmentation is still on"
# Unquoted: the shell made two words of it.
"$BVLUA" train configs/lines/resnet.lua:runlocal, flip=false --dry-run >"$TMP/out" 2>&1
[ $? -eq 2 ] || fail "unquoted: exit code"
grep -qF 'two configs given: "configs/lines/resnet.lua:runlocal," and "flip=false": the shell splits the config'"'"'s arguments at a blank; write them without blanks (configs/lines/resnet.lua:runlocal,flip=false) or quote them' "$TMP/out" \
  || fail "the unquoted message"
# A misspelt argument is quoted and its near miss named.
"$BVLUA" train "configs/lines/resnet.lua:runlocal,flp=false" --dry-run >"$TMP/out" 2>&1
[ $? -eq 1 ] || fail "misspelt: exit code"
grep -qF "Unhandled config args remain: \"flp\" (did you mean 'flip'?)" "$TMP/out" \
  || fail "the misspelt argument"
echo OK
