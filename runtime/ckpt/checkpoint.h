// Training checkpoints: atomic, resumable, verified on load.
//
// A checkpoint is a directory WORKDIR/ckpt-<step, 9 digits>/ with two files:
//   tensors.safetensors  every tensor, under the caller's names ("params/img/head/kernel",
//                        "opt/mu/...")
//   manifest.json        {"format": "bvlua.checkpoint", "version": 1, "step": N, "keep": bool,
//                         "files": {"tensors.safetensors": {"bytes": B, "crc32": "8 hex digits"}},
//                         "state": <the caller's JSON: data position, rng, chrono, ...>}
// The checksum is zlib's CRC-32 (the ZIP/PNG one) of the whole tensors file.
// WORKDIR/LAST holds the name of the newest checkpoint directory.
//
// Save writes ckpt-<step>.tmp-<pid>/, fsyncs its files and the directory, renames it into place
// (atomically swapping out an existing same-step directory), fsyncs WORKDIR, then replaces LAST
// through a temporary file (fsync + rename + fsync). A process killed at any moment leaves the
// previous checkpoint and LAST intact; its *.tmp-<pid> leftovers are ignored by the loader and
// removed by the next save once that pid is gone.
//
// Retention (big_vision's keep_ckpt_steps): a save with keep=true is kept forever. After each
// successful save, every other checkpoint whose manifest says keep=false is deleted: the earlier
// ones, and later ones left behind when a run resumed from an earlier step (they would otherwise
// win a fallback over the run's newer history).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace bv::ckpt {

struct LoadedCheckpoint {
  int64_t step = 0;
  std::vector<std::pair<std::string, at::Tensor>> tensors;  // CPU, in name order
  std::string state_json;
  std::string path;     // the checkpoint directory that was loaded
  std::string warning;  // non-empty when LAST was missing or broken and a fallback was loaded
  bool keep = false;
};

// "ckpt-000000042".
std::string checkpoint_dir_name(int64_t step);

// state_json must be valid JSON (it is stored inside manifest.json). step >= 0. Returns
// warnings for the caller to show: leftovers that could not be deleted (the new checkpoint is
// safe; they only cost disk space).
std::vector<std::string> save_checkpoint(
    const std::string& workdir, int64_t step,
    const std::vector<std::pair<std::string, at::Tensor>>& tensors, const std::string& state_json,
    bool keep);

// The checkpoint LAST names, verified (manifest, size, CRC-32). When LAST is missing or its
// target fails verification, the newest valid ckpt-* directory instead, with `warning` saying
// why. nullopt when WORKDIR holds no checkpoint at all; an error naming each failure when it
// holds some but none is valid.
std::optional<LoadedCheckpoint> load_latest_checkpoint(const std::string& workdir);

// Loads and verifies one checkpoint directory.
LoadedCheckpoint load_checkpoint_dir(const std::string& dir);

// Steps of the complete checkpoint directories (those with a manifest.json), ascending. Does not
// verify them.
std::vector<int64_t> list_checkpoints(const std::string& workdir);

}  // namespace bv::ckpt
