#!/usr/bin/env bash
# scripts/bench's PaliGemma peer is the same model as bvlua's: bench_paligemma.lua's check
# writes parameters, batches and bvlua's outputs, and bench_paligemma_peer.py's check computes
# the same in plain PyTorch and fails on any difference beyond float32 rounding (logits, loss,
# all 98 gradients, the greedy tokens); with one parameter tensor changed, it fails naming what.
# Usage: bench_paligemma_check_test.sh path/to/bvlua   (BV_PYTHON: the venv's python)
set -u
BVLUA=$(realpath "${1:?usage: bench_paligemma_check_test.sh path/to/bvlua}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${BV_PYTHON:-$ROOT/.venv/bin/python}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$ROOT/tests/cli/checks.sh"
cd "$ROOT" || exit 1

run "$BVLUA" run scripts/bench_paligemma.lua check "$TMP/c"
expect_rc 0 "bvlua's check"
run "$PY" scripts/bench_paligemma_peer.py check "$TMP/c"
expect_rc 0 "the peer's check"
expect_in out "check: the same model" "the peer's check"
expect_in out "256 of 256 the same" "the greedy tokens"

# One Gemma layer's MLP output kernel scaled by 1.001 in what the peer loads.
"$PY" - "$TMP/c/params.npz" <<'PY'
import sys, numpy as np
p = dict(np.load(sys.argv[1]))
p["llm/layers/mlp/linear"] = p["llm/layers/mlp/linear"] * np.float32(1.001)
np.savez(sys.argv[1], **p)
PY
run "$PY" scripts/bench_paligemma_peer.py check "$TMP/c"
expect_rc 1 "the peer's check on changed parameters"
expect_in err "check: train logits differs" "the peer's check on changed parameters"
run "$BVLUA" run scripts/bench_paligemma.lua check
expect_rc 1 "bvlua's check without a directory"
expect_in err "check DIR" "bvlua's check without a directory"
finish
