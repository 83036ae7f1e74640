#!/usr/bin/env bash
# The bvlua command as a user meets it: exit codes (0 ok, 1 Lua error, 2 usage error), messages,
# `train --dry-run`, the plain repl, --threads. Usage: cli_test.sh path/to/bvlua
set -u
BVLUA=${1:?usage: cli_test.sh path/to/bvlua}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
checks=0

# run CMD...: captures stdout, stderr and the exit code of one bvlua invocation.
run() {
  "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
}

fail() {
  failures=$((failures + 1))
  echo "FAIL: $*"
  echo "  stdout: $(head -c 600 "$TMP/out")"
  echo "  stderr: $(head -c 600 "$TMP/err")"
}

expect_rc() {  # expect_rc WANT what
  checks=$((checks + 1))
  [ "$rc" -eq "$1" ] || fail "$2: exit code $rc, want $1"
}

expect_in() {  # expect_in out|err TEXT what
  checks=$((checks + 1))
  grep -qF -- "$2" "$TMP/$1" || fail "$3: '$2' not in std$1"
}

# --- global flags and usage errors ---
run "$BVLUA";                    expect_rc 2 "no command";       expect_in err "usage:" "no command"
run "$BVLUA" frobnicate;         expect_rc 2 "unknown command";  expect_in err "unknown command 'frobnicate'" "unknown command"
run "$BVLUA" --frob run x.lua;   expect_rc 2 "unknown flag";     expect_in err "unknown option '--frob'" "unknown flag"
run "$BVLUA" --help;             expect_rc 0 "--help";           expect_in out "bvlua [--threads N] COMMAND" "--help"
run "$BVLUA" run --help;         expect_rc 0 "run --help";       expect_in out "usage: bvlua run" "run --help"
run "$BVLUA" repl --help;        expect_rc 0 "repl --help";      expect_in out "usage: bvlua repl" "repl --help"
run "$BVLUA" train --help;       expect_rc 0 "train --help";     expect_in out "--workdir" "train --help"
run "$BVLUA" --version;          expect_rc 0 "--version";        expect_in out "libtorch 2." "--version"
checks=$((checks + 1))
grep -qE '^cuda( [0-9]+\.[0-9]+: compiled in; (no GPU|[0-9]+ GPU\(s\)) available|: not compiled in)' "$TMP/out" \
  || fail "--version: no cuda line saying whether CUDA is compiled in and a GPU available"
checks=$((checks + 1))
grep -qE '^nccl( [0-9.]+: compiled in|: not compiled in)$' "$TMP/out" || fail "--version: no nccl line"
cp "$TMP/out" "$TMP/version"
if grep -q "^cuda .*compiled in" "$TMP/version"; then
  # A CUDA build links libtorch_cuda itself (loading it is what registers CUDA with ATen).
  checks=$((checks + 1))
  ldd "$(dirname "$BVLUA")/bvlua-core" | grep -q "libtorch_cuda.so" \
    || fail "--version says CUDA is compiled in, ldd shows no libtorch_cuda in bvlua-core"
fi
# The launcher answers --version without libtorch (bindings/launcher.cpp), asking the driver
# whether there is a GPU: libtorch must see the same.
checks=$((checks + 1))
! ldd "$BVLUA" | grep -q "libtorch" || fail "the bvlua launcher links libtorch"
# Without bvlua-core beside it, the launcher says which file it cannot run (and --version still
# works).
mkdir -p "$TMP/alone" && cp "$BVLUA" "$TMP/alone/bvlua"
run "$TMP/alone/bvlua" run x.lua; expect_rc 1 "launcher alone"
expect_in err "cannot run $TMP/alone/bvlua-core" "launcher alone names bvlua-core"
run "$TMP/alone/bvlua" --threads 2 --version; expect_rc 0 "launcher alone --version"
expect_in out "libtorch 2." "launcher alone --version"
run "$BVLUA" -e 'print(bv.cuda_available() and "gpu" or "no gpu")'; expect_rc 0 "bv.cuda_available"
checks=$((checks + 1))
if grep -q "GPU(s) available" "$TMP/version"; then
  grep -qx "gpu" "$TMP/out" || fail "--version says a GPU is available, libtorch sees none"
else
  grep -qx "no gpu" "$TMP/out" || fail "--version says no GPU is available, libtorch sees one"
fi
# refused_early WHAT NAMED REMEDY ARGS...: `bvlua train ARGS` fails with exit 1 before it makes
# its workdir, naming the culprit (NAMED) and what to use instead (REMEDY).
refused_early() {
  local what=$1 named=$2 remedy=$3
  shift 3
  rm -rf "$TMP/refused"
  run "$BVLUA" train configs/bit_lines.lua:quick --workdir "$TMP/refused" "$@"
  expect_rc 1 "$what"; expect_in err "$named" "$what names it"; expect_in err "$remedy" "$what says what to use"
  checks=$((checks + 1))
  [ ! -e "$TMP/refused" ] || fail "$what started the run (made its workdir)"
}
checks=$((checks + 1))
grep -qE '^device: (cpu|cuda:0) ' "$TMP/version" || fail "--version: no device line"
if ! grep -q "GPU(s) available" "$TMP/version"; then
  # NCCL or a GPU device without a GPU: a clear error before anything is loaded or launched, in
  # one process or two.
  for nproc in 1 2; do
    refused_early "--backend nccl without a GPU (--nproc $nproc)" "backend 'nccl'" "--backend gloo" \
      --backend nccl --nproc $nproc
  done
  for dev in cuda cuda:0; do
    refused_early "--device $dev without a GPU" "device '$dev'" "--device cpu" --device $dev
  done
  echo 'return {device = "cuda"}' >"$TMP/cfg_cuda.lua"
  run "$BVLUA" train "$TMP/cfg_cuda.lua" --dry-run
  expect_rc 1 "config.device = cuda without a GPU"; expect_in err "device 'cuda'" "config.device named"
fi
run "$BVLUA" train configs/bit_lines.lua:quick --dry-run --device tpu
expect_rc 1 "--device tpu"; expect_in err "device 'tpu' is not one of auto, cpu, cuda, cuda:N" "bad device"
run "$BVLUA" train configs/bit_lines.lua:quick --dry-run --device=cpu
expect_rc 0 "--device=cpu"
run "$BVLUA" train configs/bit_lines.lua:quick --dry-run --device
expect_rc 2 "--device without a value"; expect_in err "--device needs a value" "--device usage"
run "$BVLUA" run;                expect_rc 2 "run without script"
run "$BVLUA" run "$TMP/missing.lua"; expect_rc 1 "missing script"; expect_in err "missing.lua" "missing script named"

# --- Lua errors: message, traceback, exit 1 ---
run "$BVLUA" -e 'error("boom")'
expect_rc 1 "-e error"; expect_in err "boom" "-e error message"; expect_in err "stack traceback" "-e traceback"
cat >"$TMP/bad.lua" <<'LUA'
local a = bv.zeros({2, 3})
local b = a:matmul(bv.zeros({4, 5}))
LUA
run "$BVLUA" run "$TMP/bad.lua"
expect_rc 1 "C++ error in a script"; expect_in err "bad.lua:2: " "C++ error names file:line"
# A command's error: the message and the user's own file:line, not the traceback through
# bvlua's library (BV_TRACEBACK=1 gives it).
printf 'return {get_config = function()\n  local m = bv.models.build("bit", {depth = 26, width = 0.3})\n  return {}\nend}\n' \
  >"$TMP/cfg_err.lua"
run "$BVLUA" train "$TMP/cfg_err.lua" --dry-run
expect_rc 1 "an error in a config"; expect_in err "bvlua: bit: width 0.3 gives" "the message first"
expect_in err "  in $TMP/cfg_err.lua:2" "the user's file:line"
checks=$((checks + 1)); grep -q "stack traceback\|lib/bv/" "$TMP/err" && fail "no traceback through bvlua's library"
expect_in err "BV_TRACEBACK=1" "how to see the traceback"
BV_TRACEBACK=1 "$BVLUA" train "$TMP/cfg_err.lua" --dry-run >"$TMP/out" 2>"$TMP/err"
expect_in err "stack traceback" "BV_TRACEBACK=1 gives the traceback"
# Resuming a workdir (it holds a checkpoint) with changed values: a NOTE names them and the
# previous config.json stays beside the new one.
printf 'return {lr = 0.001, model = {depth = 26}, total_steps = 2}\n' >"$TMP/resume_cfg.lua"
run "$BVLUA" train "$TMP/resume_cfg.lua" --workdir "$TMP/resumed" --dry-run
run "$BVLUA" -e "bv.ckpt.save('$TMP/resumed', 1, {['params/w'] = bv.zeros({1})}, {step = 1})"
run "$BVLUA" train "$TMP/resume_cfg.lua" --workdir "$TMP/resumed" --dry-run --config.lr=0.003 \
  --config.model.depth=50
expect_rc 0 "resume with changed overrides"
expect_in out "differs from the one it was trained with (kept as config.json.1)" "changes noted"
expect_in out "lr 0.001 -> 0.003" "lr change named"; expect_in out "model.depth 26 -> 50" "nested change"
checks=$((checks + 1)); grep -q '"lr": 0.001' "$TMP/resumed/config.json.1" || fail "previous config kept"
run "$BVLUA" train "$TMP/resume_cfg.lua" --workdir "$TMP/resumed" --dry-run --config.lr=0.003 \
  --config.model.depth=50
checks=$((checks + 1)); grep -q "differs" "$TMP/out" && fail "the same config again: no note"
checks=$((checks + 1)); [ -e "$TMP/resumed/config.json.2" ] && fail "the same config again: nothing kept"
run "$BVLUA" -e 'local x = '
expect_rc 1 "syntax error"; expect_in err "unexpected symbol" "syntax error message"

# --- scripts get `arg` as lua.c gives it ---
cat >"$TMP/args.lua" <<'LUA'
print(arg[0], arg[1], arg[2], #arg, select("#", ...))
LUA
run "$BVLUA" run "$TMP/args.lua" a b
expect_rc 0 "script args"; expect_in out "$TMP/args.lua	a	b	2	2" "arg table"

# --- threads ---
run "$BVLUA" --threads 1 -e 'print("threads", bv.threads())'
expect_rc 0 "--threads 1"; expect_in out "threads	1" "--threads 1 applied"
run env BV_THREADS=2 "$BVLUA" -e 'print("threads", bv.threads())'
expect_in out "threads	2" "BV_THREADS applied"
run "$BVLUA" -e 'print("threads", bv.threads())'
expect_in out "threads	$(nproc)" "default threads = cores"
run "$BVLUA" --threads 0 -e 'print(1)'; expect_rc 2 "--threads 0"; expect_in err "--threads" "--threads 0 named"
# After the command too (train, repl, runs, sweep, plot, mistakes), as a Python user types it.
echo 'print("threads", bv.threads())' >"$TMP/threads_in"
"$BVLUA" repl --threads 1 <"$TMP/threads_in" >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc 0 "repl --threads 1"; expect_in out "threads	1" "--threads 1 after repl applied"
"$BVLUA" repl --threads=x <"$TMP/threads_in" >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc 2 "repl --threads=x"; expect_in err "--threads needs a positive integer, got 'x'" "bad --threads after repl"

# --- train: config args, overrides, dry run, config.json ---
W="$TMP/w"
run "$BVLUA" train configs/bit_lines.lua:flip=false --config.lr=0.1 --config.input.batch_size 32 --workdir "$W" --dry-run
expect_rc 0 "train --dry-run"
expect_in out '"lr": 0.1' "override printed"
expect_in out '"batch_size": 32' "nested override printed"
checks=$((checks + 1))
grep -q 'flip_lr' "$TMP/out" && fail "config arg flip=false not applied"
checks=$((checks + 1))
[ -f "$W/config.json" ] || fail "config.json not written"
checks=$((checks + 1))
grep -q '"lr": 0.1' "$W/config.json" || fail "config.json lacks the override"
run "$BVLUA" train configs/bit_lines.lua --config.nope=1 --workdir "$W"
checks=$((checks + 1)); [ "$rc" -ne 0 ] || fail "unknown key accepted"
expect_in err "nope" "unknown key named"
run "$BVLUA" train configs/bit_lines.lua --config.lr=abc --workdir "$W" --dry-run
checks=$((checks + 1)); [ "$rc" -ne 0 ] || fail "bad coercion accepted"
expect_in err "lr" "bad coercion names the key"
run "$BVLUA" train configs/bit_lines.lua --bogus --workdir "$W"
expect_rc 2 "train unknown flag"; expect_in err "--bogus" "train unknown flag named"
run "$BVLUA" train "$TMP/nofile.lua" --workdir "$W" --dry-run
expect_rc 1 "missing config"; expect_in err "nofile.lua" "missing config named"

# --- the plain repl ---
printf 'x = 20\nx + 1\nx * 2;\nfor i = 1, 2 do\n  print("i", i)\nend\nerror("oops")\nprint("after")\n' >"$TMP/in"
"$BVLUA" repl <"$TMP/in" >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc 0 "repl exit"
expect_in out "21" "repl auto-print"
checks=$((checks + 1)); grep -q '^40$' "$TMP/out" && fail "trailing ; must suppress printing"
expect_in out "i	2" "repl multi-line"
expect_in err "oops" "repl error shown"
expect_in out "after" "repl continues after an error"
# Statements, then an expression: its value prints (`x = f(); x`); not so with a trailing ';'.
printf 'y = 41 + 1; y\nlocal s = "a;b"; s .. "!"\nz = 5; z * 100;\n' >"$TMP/in"
"$BVLUA" repl <"$TMP/in" >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc 0 "repl statements then an expression"
expect_in out "42" "x = f(); x prints x"
expect_in out "a;b!" "a ; inside a string is not a split"
checks=$((checks + 1)); grep -q '^500$' "$TMP/out" && fail "trailing ; after statements must suppress printing"

# --- one Lua test by name (HACKING.md): the test runner filters on the first argument ---
run "$BVLUA" run tests/lua/pp_test.lua parse_op
expect_rc 0 "one Lua test by name"; expect_in out "2 passed, 0 failed" "only the parse_op cases"
run "$BVLUA" run tests/lua/pp_test.lua no_such_test
expect_rc 1 "a filter that matches nothing"; expect_in err "no test name contains 'no_such_test'" \
  "a filter that matches nothing says so"

echo "$((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
