#!/usr/bin/env bash
# Every input bounded (issue 31), through `bvlua train`: a ViT patch size of 0 and a batch size
# of 1e9 each end within seconds with exit 1 and an error naming the config key (they were a
# SIGFPE and a memory leak until killed); a 10 MB bad JSON-L line makes a short error; an image
# whose header claims 12000x11000 pixels is refused before decoding and, with skip_errors,
# skipped and counted. Usage: bounded_inputs_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: bounded_inputs_test.sh path/to/bvlua}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$ROOT/tests/cli/checks.sh"

check "make_lines" "$BVLUA" run "$ROOT/scripts/make_lines.lua" "$TMP/lines" --train 8 --val 2 \
  --test 1 >/dev/null

cat >"$TMP/cfg.lua" <<LUA
return function()
  local data = {name = "bv:jsonl", fname = "$TMP/lines/train.jsonl",
                fopen_keys = {image = "$TMP/lines"}}
  return {
    seed = 0, total_steps = 2, num_classes = 3, loss = "softmax_xent", log_training_steps = 1,
    input = {data = data, batch_size = 4, skip_errors = true,
             pp = 'decode|resize(32)|value_range(-1, 1)|onehot(3, key="label", key_result="labels")|keep("image", "labels")'},
    model_name = "vit", model = {variant = "mu/8"},
    optax_name = "scale_by_adam", lr = 0.001,
  }
end
LUA

# train_fast WHAT ARGS...: `bvlua train` that must end within 20 s (a hang is killed at 60).
train_fast() {
  local what=$1
  shift
  local start=$SECONDS
  run timeout 60 "$BVLUA" train "$TMP/cfg.lua" --workdir "$TMP/w" "$@"
  check "$what: took $((SECONDS - start)) s" [ $((SECONDS - start)) -lt 20 ]
}

train_fast "patch size 0" --config.model.variant=mu/0
expect_rc 1 "patch size 0"
expect_in err "vit: model.variant 'mu/0': the patch size must be positive" "patch size 0"

train_fast "image size" --config.model.variant=mu/64
expect_rc 1 "image size"
expect_in err "vit: the image size 32x32 (model.image_size; the training images' size when it is not set) is smaller than one 64x64 patch (model.variant 'mu/64')" "image size"

train_fast "batch_size 1e9" --config.input.batch_size=1000000000
expect_rc 1 "batch_size 1e9"
expect_in err "data: input.batch_size asks for batches of 1000000000 examples (per process), which cannot fit in memory" "batch_size 1e9"
expect_in err "make input.batch_size smaller" "batch_size 1e9"

# A 10 MB line that is not JSON: the error quotes a snippet of it.
cp "$TMP/lines/train.jsonl" "$TMP/lines/good.jsonl"
{ printf '{"image": "train_00000.png", "label": "'; head -c 10000000 /dev/zero | tr '\0' x;
  printf '}\n'; } >"$TMP/lines/train.jsonl"
run "$BVLUA" train "$TMP/cfg.lua" --workdir "$TMP/w" --config.input.skip_errors=false
expect_rc 1 "a 10 MB bad line"
expect_in err "train.jsonl:1: bad JSON: parse error at line 1" "a 10 MB bad line"
check "a 10 MB bad line: stderr has $(wc -c <"$TMP/err") bytes" [ "$(wc -c <"$TMP/err")" -lt 2000 ]

# A JPEG header claiming 12000x11000 pixels in 1 KB: over the default cap (PIL's), refused before
# decoding; with skip_errors the run goes on and counts it.
"$BVLUA" -e "
local jpeg = bv.image.encode_jpeg(bv.zeros({8, 8, 3}):to('uint8'))
local sof = jpeg:find('\xFF\xC0', 1, true)
bv.fs.write_file('$TMP/lines/huge.jpg', jpeg:sub(1, sof + 4) .. string.pack('>I2I2', 12000, 11000) .. jpeg:sub(sof + 9))" \
  || fail "writing huge.jpg"
{ echo '{"image": "huge.jpg", "label": 0}'; cat "$TMP/lines/good.jsonl"; } >"$TMP/lines/train.jsonl"
run "$BVLUA" train "$TMP/cfg.lua" --workdir "$TMP/w2" --config.total_steps=3
expect_rc 0 "a huge header with skip_errors"
expect_in out "skip_errors: skipped " "the refusal counted"
expect_in out "image of 12000x11000 pixels (height x width) exceeds the cap of 89478485 (input.max_pixels)" "the refusal named"
finish
