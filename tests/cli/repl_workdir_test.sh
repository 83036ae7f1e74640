#!/usr/bin/env bash
# `bvlua repl WORKDIR` on the tutorial's ResNet run (configs/lines/resnet.lua:runlocal, whose
# train pp has an op of its own, lines_flip_ud): the REPL runs the recorded config's
# register_pp_ops, so run.pp("train") and ?lines_flip_ud work; a config file that moved, or no
# record, is a one-line warning naming the unknown op, not a traceback. The banner counts the
# checkpoint's parameters and optimizer state apart (tensors, values, bytes).
# Usage: repl_workdir_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: repl_workdir_test.sh path/to/bvlua}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
source "$ROOT/tests/cli/checks.sh"

cd "$TMP" || exit 1
"$BVLUA" run "$ROOT/scripts/make_lines.lua" data/lines --train 64 --val 16 --test 4 >/dev/null \
  || { echo "FAIL: make_lines"; exit 1; }
mkdir cfg && cp "$ROOT/configs/lines/resnet.lua" cfg/resnet.lua
run "$BVLUA" train cfg/resnet.lua:runlocal --workdir w
expect_rc 0 "training the tutorial's ResNet"
[ "$rc" -eq 0 ] || { finish; exit 1; }
# `bvlua train` records which config made the run (bv.config_source).
check "train recorded its config in w/config_source.json" \
  grep -qF "\"file\":\"$(pwd -P)/cfg/resnet.lua\"" w/config_source.json

REPL_INPUT='ex = run.pp("train")({image = bv.fs.read_file("../data/lines/train_00000.png"), label = 1})
print("shape", table.concat(ex.image:shape(), "x"), ex.labels:sum():item())
?lines_flip_ud'

# From another directory: the record holds the config file's absolute path.
mkdir elsewhere
run sh -c "cd elsewhere && printf '%s\n' '$REPL_INPUT' | '$BVLUA' repl ../w"
expect_rc 0 "the REPL on the workdir"
expect_in out "shape	32x32x3	1.0" "run.pp('train') with the config's own op"
expect_in out "pp op lines_flip_ud(): flips the image" "?lines_flip_ud"
expect_not_in err "WARNING" "a recorded config that is there"
expect_not_in err "unknown op" "a recorded config that is there"

# The banner: parameters and optimizer state apart, and the numbers are the model's.
expect_in out "parameters (params/):" "the banner's parameters"
expect_in out "optimizer state (opt/):" "the banner's optimizer state"
check "the banner's counts are the model's and the state's" "$BVLUA" -e "
local run = require('bv.inspect').run('w')
local model = run.model()
local n = 0
for _, s in ipairs(model:param_shapes()) do
  local k = 1
  for _, d in ipairs(s.shape) do k = k * d end
  n = n + k
end
local g = run.ckpt:groups()
assert(g[1].name == 'params' and g[1].count == n, 'params: ' .. g[1].count .. ' vs ' .. n)
assert(g[2].name == 'opt' and g[2].tensors > 0, 'opt: second')
local want = require('bv.inspect').commas(n) .. '  parameters  in ' .. g[1].tensors .. ' tensors'
local text = run.ckpt:summary()
assert(text:find(want, 1, true), text)
local opt = require('bv.inspect').commas(g[2].count) .. '  values      in ' .. g[2].tensors
assert(text:find(opt, 1, true), text)
assert(g[1].bytes + g[2].bytes + (g[3] and g[3].bytes or 0) == run.ckpt:bytes(), 'bytes add up')"

# The config file moved away: one line of warning, and the REPL still opens.
mv cfg moved
run sh -c "printf '%s\n' '1 + 1' | '$BVLUA' repl w"
expect_rc 0 "the REPL with the config gone"
expect_in err "bvlua repl: WARNING: w was trained from $TMP/cfg/resnet.lua, which is not there any more (moved or deleted): its pp names lines_flip_ud, unknown here" \
  "the warning names the file and the op"
check "the warning is one line" [ "$(wc -l <"$TMP/err")" -eq 1 ]
expect_not_in err "traceback" "no traceback"
expect_in out "2" "the prompt works"

# No record (a run from before bvlua kept one): the same one line, naming the missing record.
rm w/config_source.json
run sh -c "printf '%s\n' '1 + 1' | '$BVLUA' repl w"
expect_rc 0 "the REPL without a record"
expect_in err "(no config_source.json;" "the warning names the missing record"
check "the warning is one line" [ "$(wc -l <"$TMP/err")" -eq 1 ]
finish
