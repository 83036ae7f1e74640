#!/usr/bin/env bash
# `bvlua sweep` over a config argument (:flip) and a config key (lr) with a fixed --config
# override: each job's config.json holds its values and the override, its name the swept values
# only; the status table shows each job's last checkpoint. A bad key, value or argument in any
# job (and what bv.preflight finds) is listed, naming the jobs, before anything is launched: no
# workdir is made. A sweep file's bare name that is only an argument of the config (crop) sweeps
# that argument.
# Usage: sweep_args_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: sweep_args_test.sh path/to/bvlua}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; tail -30 "$TMP/out" 2>/dev/null; exit 1; }

cd "$TMP" || exit 1
"$BVLUA" run "$ROOT/scripts/make_lines.lua" data/lines --train 64 --val 16 --test 4 >/dev/null \
  || fail "make_lines"
CFG="$ROOT/configs/lines/resnet.lua:runlocal"

"$BVLUA" sweep "$CFG" --workdir sw --grid lr=1e-3,3e-4 --grid :flip=true,false \
  --config.total_steps=2 --config.wd=1.2345678e-5 --jobs 2 >"$TMP/out" 2>&1 \
  || fail "the sweep exited with $?"
names=$(cd sw && echo */)
[ "$names" = "lr0.0003_flipfalse/ lr0.0003_fliptrue/ lr0.001_flipfalse/ lr0.001_fliptrue/" ] \
  || fail "the runs are named $names"
for lr in 0.001 0.0003; do
  for flip in true false; do
    c=sw/lr${lr}_flip$flip/config.json
    grep -q "^  \"lr\": $lr,\$" "$c" || fail "$c: lr is not $lr"
    grep -q '^  "total_steps": 2,$' "$c" || fail "$c: the fixed --config.total_steps=2 is not there"
    # A fixed override reaches the job as given, every digit.
    grep -q '^  "wd": 1.2345678e-05,\?$' "$c" || fail "$c: --config.wd=1.2345678e-5 is not there"
    # flip=true adds the config's own up-down flip to the training pp, flip=false leaves it out.
    n=$(grep -c 'flip_lr|lines_flip_ud' "$c")
    [ "$n" = "$([ $flip = true ] && echo 1 || echo 0)" ] || fail "$c: flip=$flip, not in the pp"
  done
done
grep -Eq '^  done +lr0.001_fliptrue +step 2  ckpt 2  eval/acc/prec@1 [0-9.]+ ' "$TMP/out" \
  || fail "the status table shows no checkpoint"

# One bad value of an argument and an unknown key: every problem listed, nothing launched.
"$BVLUA" sweep "$CFG" --workdir bad --grid lr=1e-3,3e-4 --grid :flip=true,maybe \
  --config.total_stepz=2 >"$TMP/out" 2>&1
code=$?
[ "$code" = 1 ] || fail "a bad sweep exited with $code, want 1"
[ -e bad ] && fail "a bad sweep made its workdir"
grep -q '^bvlua sweep: 4 of 4 jobs would fail; nothing was launched:$' "$TMP/out" \
  || fail "no summary of the failing jobs"
grep -Fq '  lr0.001_flipmaybe, lr0.0003_flipmaybe: ' "$TMP/out" || fail "the bad value's jobs"
grep -Fq 'key "flip" expects true or false, got "maybe"' "$TMP/out" || fail "the bad value"
want="unknown config key \"total_stepz\" (--config.total_stepz) (did you mean 'total_steps'?)"
grep -Fq "  lr0.001_fliptrue, lr0.0003_fliptrue: $want" "$TMP/out" \
  || fail "the unknown key, its jobs and the key meant"
grep -q 'start' "$TMP/out" && fail "a job started"

# What `bvlua train --dry-run` finds (bv.preflight) in one job of two: a BiT depth that is none.
"$BVLUA" sweep "$CFG" --workdir bad --grid model.depth=26,27 >"$TMP/out" 2>&1
[ $? = 1 ] || fail "a bad model: exit code"
grep -Fq '1 of 2 jobs would fail' "$TMP/out" \
  && grep -Fq '  model_depth27: model: bit: unknown depth 27' "$TMP/out" \
  || fail "the job with the bad model"

# A bad argument value in one job of two, and an unknown argument.
"$BVLUA" sweep "$CFG" --workdir bad --grid lr=1e-3 --grid :res=16,abc >"$TMP/out" 2>&1
[ $? = 1 ] || fail "a bad argument value: exit code"
grep -Fq '1 of 2 jobs would fail' "$TMP/out" && grep -Fq 'lr0.001_resabc: ' "$TMP/out" \
  || fail "the job with the bad argument value"
"$BVLUA" sweep "$CFG" --workdir bad --grid :flipp=true >"$TMP/out" 2>&1
[ $? = 1 ] || fail "an unknown argument: exit code"
grep -Fq "\"flipp\" (did you mean 'flip'?)" "$TMP/out" || fail "the unknown argument"
# A bare name that is neither a key nor an argument, but close to one.
"$BVLUA" sweep "$CFG" --workdir bad --grid flipp=true >"$TMP/out" 2>&1
[ $? = 1 ] && grep -Fq '"flipp" is no config key and no argument of the config' "$TMP/out" \
  && grep -Fq '(did you mean the argument ":flip"?)' "$TMP/out" \
  || fail "a bare name close to an argument"
[ -e bad ] && fail "a bad sweep made its workdir"

# A sweep file: crop is an argument of the config and no config key, so the grid's bare "crop"
# is the argument; overrides go to every job. A number reaches the job whole (a swept lr, a fixed
# wd that needs 17 digits); the run's name keeps 6.
cat >sweep.lua <<LUA
return {config = "$CFG", workdir = "$TMP/file", status = 0,
        grid = {{"crop", {false}}, {"lr", {1.2345678e-4}}},
        overrides = {total_steps = 1, ["input.batch_size"] = 4, wd = 0.1 + 0.2}}
LUA
"$BVLUA" sweep sweep.lua >"$TMP/out" 2>&1 || fail "the sweep file exited with $?"
c=file/cropfalse_lr0.000123457/config.json
[ -f "$c" ] || fail "the run is not named cropfalse_lr0.000123457: $(ls file)"
grep -q '^    "batch_size": 4,$' "$c" && grep -q '^  "total_steps": 1,$' "$c" \
  || fail "$c: the file's overrides"
grep -q '^  "lr": 0.00012345678,$' "$c" || fail "$c: the swept lr lost digits"
grep -q '^  "wd": 0.30000000000000004,\?$' "$c" || fail "$c: the fixed wd lost digits"
grep -q 'random_crop' "$c" && fail "$c: crop=false still crops"
echo OK
