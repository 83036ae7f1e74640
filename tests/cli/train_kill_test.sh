#!/usr/bin/env bash
# A real `bvlua train` killed with SIGKILL inside its checkpoint saves, again and again, ends
# exactly where an uninterrupted run ends (reliability test R2, closer to real life than
# checkpoint_kill_test.sh). A tiny ViT whose head has 100,000 classes (a 40 MB checkpoint, so a
# save takes long enough to be hit) trains 30 steps with a checkpoint every step. Each run is
# killed at one of three moments of a save, watched in the workdir: when its ckpt-*.tmp-<pid>
# directory appears (tensors being written), when the manifest is in it (just before the rename),
# or when it is gone (renamed; LAST and retention under way). After each kill the next run must
# resume from the newest checkpoint on disk (whether or not LAST had been updated) and the
# metrics file must hold no step twice once it is resumed. Then one run is killed during its final
# evaluation and one inside the deletion of the old checkpoint (after the last one is in place),
# and the finished run is started once more (it removes the half-deleted directory). At the end: the final tensors are byte-identical to
# the uninterrupted run's, the metrics file has every step 0..30 exactly once, and its
# training_loss values are those of the uninterrupted run, bit for bit.
# Usage: train_kill_test.sh path/to/bvlua
set -u
BVLUA=${1:?usage: train_kill_test.sh path/to/bvlua}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
KILLS=${BV_KILLS:-12}
TOTAL=30

"$BVLUA" -e "
local json = require 'bv.json'
local rng, lines = bv.rng(0), {}
for i = 1, 24 do
  local img = (bv.rand({8, 8, 3}, rng) * 255):to('uint8')
  bv.image.write_png(img, '$TMP/' .. i .. '.png')
  lines[i] = json.encode({image = i .. '.png', label = (i * 7919) % 100000})
end
bv.fs.write_file('$TMP/train.jsonl', table.concat(lines, '\n'))" || fail "making data"

# An evaluation at the last step only; SLOW_EVAL=1 makes each of its examples take 0.3 s (a
# window for the kill during the final evaluation).
cat >"$TMP/cfg.lua" <<LUA
local slow = os.getenv("SLOW_EVAL") == "1"
local labels = 'onehot(100000, key="label", key_result="labels")|keep("image", "labels")'
return {
  register_pp_ops = function()
    bv.pp.register("slow_if_asked", function()
      return function(data)
        local t = os.clock()
        while slow and os.clock() - t < 0.3 do end
        return data
      end
    end, "slow_if_asked(): 0.3 s per example when SLOW_EVAL=1 (train_kill_test.sh)")
  end,
  get_config = function() return {
    seed = 0, total_steps = $TOTAL, num_classes = 100000, loss = "softmax_xent",
    input = {data = {name = "bv:jsonl", fname = "$TMP/train.jsonl", fopen_keys = {image = "$TMP"}},
             batch_size = 4, shuffle_buffer_size = 8,
             pp = 'decode|flip_lr|value_range(-1, 1)|' .. labels},
    model_name = "vit", model = {variant = "mu/4", depth = 1},
    optax_name = "scale_by_adam", lr = 0.001, schedule = {decay_type = "cosine", warmup_steps = 3},
    log_training_steps = 1, ckpt_steps = 1,
    evals = {val = {type = "classification", loss_name = "softmax_xent", skip_first = true,
                    log_steps = $TOTAL, batch_size = 4,
                    data = {name = "bv:jsonl", fname = "$TMP/train.jsonl", fopen_keys = {image = "$TMP"}},
                    pp = 'slow_if_asked|decode|value_range(-1, 1)|' .. labels}},
  } end,
}
LUA

train() { "$BVLUA" --threads 1 train "$TMP/cfg.lua" --workdir "$1"; }
W=$TMP/w
M=$W/big_vision_metrics.txt

# The steps of the metrics file, one a line, in file order.
steps_of() { sed -n 's/^{"step": \([0-9]*\),.*/\1/p' "$1"; }
# The newest ckpt-<9 digits> directory (complete ones only: tmp names do not match).
newest_ckpt() {
  local d newest=""
  for d in "$W"/ckpt-[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]; do
    [ -d "$d" ] && newest=$(basename "$d")
  done
  echo "$newest"
}

# Busy-waits (bash builtins only: a save lasts ~0.1 s) until the glob $1 matches (or, with
# "gone", stops matching); 1 when the process ended first.
watch_for() {
  local glob=$1 want=${2:-there}
  while kill -0 "$pid" 2>/dev/null; do
    if compgen -G "$glob" >/dev/null; then
      [ "$want" = there ] && return 0
    else
      [ "$want" = gone ] && return 0
    fi
  done
  return 1
}

inside=0 before_rename=0 before_last=0 after_save=0 resumed=0
expect_resume=""
start=$SECONDS
for i in $(seq 1 "$KILLS"); do
  "$BVLUA" --threads 1 train "$TMP/cfg.lua" --workdir "$W" >"$TMP/run$i.out" 2>&1 &
  pid=$!  # bvlua's own (the tmp directories carry it)
  tmpdir="$W/ckpt-*.tmp-$pid"
  # The save to kill: the 1st to 3rd of this run, so runs also get somewhere. The first kill
  # comes before any checkpoint exists: the next run starts from scratch.
  nth=$(( ((i + 2) % 3) + 1 ))
  moment=$(( (i - 1) % 3 ))
  ok=1
  for k in $(seq 1 "$nth"); do
    watch_for "$tmpdir" there || { ok=0; break; }
    if [ "$k" -lt "$nth" ]; then watch_for "$tmpdir" gone || { ok=0; break; }; fi
  done
  if [ "$ok" = 1 ]; then
    case $moment in
      0) ;;                                          # the directory has just appeared
      1) watch_for "$tmpdir/manifest.json" there ;;  # tensors written, manifest in
      2) watch_for "$tmpdir" gone ;;                 # renamed into place
    esac
  fi
  kill -KILL "$pid" 2>/dev/null
  { wait "$pid"; rc=$?; } 2>/dev/null
  [ "$rc" -eq 137 ] || { cat "$TMP/run$i.out"; fail "run $i ended with $rc before it was killed"; }

  # The run before resumed from the newest checkpoint there was, LAST or not.
  if [ -n "$expect_resume" ] || [ "$i" -gt 1 ]; then
    got=$(sed -n 's/^NOTE: Resumed from .*\(ckpt-[0-9]*\) at step.*/\1/p' "$TMP/run$i.out")
    [ "$got" = "$expect_resume" ] ||
      { cat "$TMP/run$i.out"; fail "run $i resumed from '$got', the newest checkpoint was $expect_resume"; }
    [ -n "$got" ] && resumed=$((resumed + 1))
  fi
  # Where the kill landed.
  newest=$(newest_ckpt)
  last=$(cat "$W/LAST" 2>/dev/null)
  if compgen -G "$tmpdir" >/dev/null; then
    where="inside the save, before the rename"; before_rename=$((before_rename + 1))
  elif [ "$last" != "$newest" ] || compgen -G "$W/ckpt-*.tmp-$pid.*" >/dev/null; then
    where="inside the save, after the rename (LAST: $last, newest: $newest)"
    before_last=$((before_last + 1))
  else
    where="after the save"; after_save=$((after_save + 1))
  fi
  echo "kill $i (save $nth, moment $moment): $where; newest checkpoint $newest"
  expect_resume=$newest
  # Lines up to the newest checkpoint (and the step in progress) only, none twice.
  dups=$(steps_of "$M" | sort -n | uniq -d | tr '\n' ' ')
  [ -z "$dups" ] || fail "after kill $i, steps logged twice: $dups"
done
inside=$((before_rename + before_last))

# Two kills at the end of the run: during the final evaluation (its step's line and checkpoint
# not written yet), then inside the old checkpoint's deletion, after the last checkpoint is in
# place and LAST names it.
SLOW_EVAL=1 "$BVLUA" --threads 1 train "$TMP/cfg.lua" --workdir "$W" >"$TMP/eval_kill.out" 2>&1 &
pid=$!
for _ in $(seq 1 1200); do
  grep -q "val evaluation" "$TMP/eval_kill.out" && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
kill -KILL "$pid" 2>/dev/null
{ wait "$pid"; rc=$?; } 2>/dev/null
[ "$rc" -eq 137 ] || { cat "$TMP/eval_kill.out"; fail "the run to kill in its final evaluation ended with $rc"; }
[ ! -d "$W/$(printf 'ckpt-%09d' "$TOTAL")" ] || fail "killed in the final evaluation, yet the last checkpoint exists"
echo "kill in the final evaluation: newest checkpoint $(newest_ckpt)"
# The old checkpoint gets 30,000 extra files, so that deleting it (after the last checkpoint is
# in place and LAST names it) takes long enough to be watched and killed.
newest=$(newest_ckpt)
mkdir "$W/$newest/slow_to_delete"
(cd "$W/$newest/slow_to_delete" && seq 1 30000 | xargs touch) || fail "making files to delete"
"$BVLUA" --threads 1 train "$TMP/cfg.lua" --workdir "$W" >"$TMP/last_kill.out" 2>&1 &
pid=$!
watch_for "$W/$newest.tmp-$pid.del" there
kill -KILL "$pid" 2>/dev/null
{ wait "$pid"; rc=$?; } 2>/dev/null
[ "$rc" -eq 137 ] || { cat "$TMP/last_kill.out"; fail "the run to kill in its old checkpoint's deletion ended with $rc"; }
[ -d "$W/$newest.tmp-$pid.del" ] || fail "the kill did not land inside the deletion of $newest"
echo "kill inside the deletion of $newest, after the last checkpoint: LAST $(cat "$W/LAST")"
expect_resume=$(printf 'ckpt-%09d' "$TOTAL")

# Started again, the finished run trains and evaluates nothing and adds no line.
train "$W" >"$TMP/final.out" 2>&1 || { cat "$TMP/final.out"; fail "the final run failed"; }
grep -q "^NOTE: Resumed from .*$expect_resume at step" "$TMP/final.out" ||
  { cat "$TMP/final.out"; fail "the final run did not resume from $expect_resume"; }
grep -q "had finished" "$TMP/final.out" || { cat "$TMP/final.out"; fail "the final run did not say the run had finished"; }
grep -q "Removed what an interrupted run left in $W: $newest.tmp-$pid.del" "$TMP/final.out" ||
  { cat "$TMP/final.out"; fail "the final run did not remove the half-deleted $newest"; }
interrupted=$((SECONDS - start))
train "$TMP/ref" >"$TMP/ref.out" 2>&1 || { cat "$TMP/ref.out"; fail "the reference run failed"; }

# Bit-identical parameters and optimizer state.
last_dir=$(printf 'ckpt-%09d' "$TOTAL")
[ "$(cat "$W/LAST")" = "$last_dir" ] || fail "LAST is $(cat "$W/LAST"), not $last_dir"
cmp "$W/$last_dir/tensors.safetensors" "$TMP/ref/$last_dir/tensors.safetensors" ||
  fail "the final tensors differ from the uninterrupted run's"

# Every step exactly once, in order, and the same losses.
want=$(seq 0 "$TOTAL" | tr '\n' ' ')
got=$(steps_of "$M" | tr '\n' ' ')
[ "$got" = "$want" ] || fail "metrics steps are '$got', want '$want'"
losses() { grep -o '"training_loss": [^,}]*' "$1"; }
[ "$(losses "$M")" = "$(losses "$TMP/ref/big_vision_metrics.txt")" ] ||
  fail "training_loss differs from the uninterrupted run's: $(diff <(losses "$M") <(losses "$TMP/ref/big_vision_metrics.txt") | head -5)"
[ "$(losses "$M" | wc -l)" -eq "$TOTAL" ] || fail "not $TOTAL training_loss values"
[ -f "$M.before-1" ] || fail "the run killed before its first checkpoint left no $M.before-1"
leftovers=$(find "$W" -maxdepth 1 -name '*.tmp-*' | wc -l)
[ "$leftovers" -eq 0 ] || { ls -la "$W"; fail "$leftovers *.tmp-* leftovers after the final run"; }

echo "$KILLS kills: $inside inside a save ($before_rename before the rename, $before_last after" \
     "it, before LAST or retention finished), $after_save after it; $resumed resumes checked;" \
     "$(ls "$W" | grep -c 'metrics.txt.dropped-') metrics files of dropped lines," \
     "$(ls "$W" | grep -c 'metrics.txt.before-') set aside; interrupted run ${interrupted}s"
[ "$inside" -ge $((KILLS / 2)) ] || fail "only $inside of $KILLS kills landed inside a save"
echo "train kill test: ok"
