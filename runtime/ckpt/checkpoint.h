// Training checkpoints: atomic, resumable, verified on load.
//
// A checkpoint is a directory WORKDIR/ckpt-<step, 9 digits>/ with three files (format version 2):
//   tensors.safetensors  every tensor, under the caller's names ("params/img/head/kernel",
//                        "opt/mu/...")
//   manifest.json        {"format": "bvlua.checkpoint", "version": 2, "step": N, "keep": bool,
//                         "files": {"tensors.safetensors": {"bytes": B, "crc32": "8 hex digits"}},
//                         "state": <the caller's JSON: data position, rng, chrono, ...>}
//   manifest.crc32       the CRC-32 of manifest.json's exact bytes: 8 lower-case hex digits and
//                        a newline. It covers the step, keep, the tensors file's checksum and the
//                        state, so an edited or damaged manifest (a changed data_position, a
//                        missing state) fails verification instead of resuming from the wrong
//                        place.
// The checksums are zlib's CRC-32 (the ZIP/PNG one). WORKDIR/LAST holds the name of the newest
// checkpoint directory. manifest.json may nest arrays and objects at most kMaxJsonDepth (256)
// levels deep; deeper is a failed checkpoint, not a stack overflow.
// Version 1 (before manifest.crc32) is still loaded, with a warning that its manifest is not
// verified; a version-1 directory that has a manifest.crc32 all the same is verified by it.
//
// Verification, in load_checkpoint_dir: manifest.json's size (at most 256 MiB) and nesting, its
// CRC-32 against manifest.crc32 (version 2), format, version, an integer step that matches the
// directory name, the "state" (required), and the tensors file's size and CRC-32 against the
// manifest's. Any failure is a bv::Error naming the directory and what failed.
//
// Save writes ckpt-<step>.tmp-<pid>/, fsyncs its files and the directory, renames it into place
// (atomically swapping out an existing same-step directory), fsyncs WORKDIR, then replaces LAST
// through a temporary file (fsync + rename + fsync). A process killed at any moment leaves the
// previous checkpoint and LAST intact; its *.tmp-<pid> leftovers are ignored by the loader and
// removed by the next save once that pid is gone. A kill between the rename and LAST's update
// leaves LAST naming the previous checkpoint: the loader takes the newer one (below).
//
// Choosing the checkpoint to resume from (load_latest_checkpoint): the newest valid one. LAST is
// checked against it: LAST missing, unreadable, naming a broken directory, or naming an older
// checkpoint than the newest valid one (a kill before LAST was updated, or LAST edited by hand)
// is reported in `warning`, naming both; newer directories that fail verification are skipped,
// each named in `warning` with its reason. To resume from an earlier checkpoint on purpose, move
// the newer ckpt-* directories out of the workdir.
//
// Retention (big_vision's keep_ckpt_steps): a save with keep=true is kept forever. After each
// successful save, every other checkpoint whose manifest says keep=false is deleted: the earlier
// ones, and later ones left behind when a run resumed from an earlier step (they failed
// verification, or the run would have resumed from them; a later one that turned valid again
// would otherwise win over the run's newer history). Directories whose manifest cannot be read
// are left alone.
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
  std::string path;  // the checkpoint directory that was loaded
  // Non-empty when something deserves the user's attention: LAST missing, broken or naming an
  // older checkpoint, newer directories skipped as invalid (each named, with the reason), a
  // version-1 checkpoint whose manifest is not verified. Several are joined with "; ".
  std::string warning;
  bool keep = false;
  int version = 0;  // the manifest's format version
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

// The newest ckpt-* directory that passes verification (see the top of this file), with
// `warning` saying what was skipped and where LAST disagrees. nullopt when WORKDIR holds no
// checkpoint at all (no LAST, no ckpt-* directory); an error naming each failure when it holds
// some but none is valid.
// with_tensors = false verifies the same (the tensors file is read once, in slices, for its
// checksum) but leaves `tensors` empty: a resume then reads its tensors one at a time
// (ckpt/index.h), so that no rank ever holds the whole checkpoint in host memory.
std::optional<LoadedCheckpoint> load_latest_checkpoint(const std::string& workdir,
                                                       bool with_tensors = true);

// Loads and verifies one checkpoint directory (with_tensors: as above).
LoadedCheckpoint load_checkpoint_dir(const std::string& dir, bool with_tensors = true);

// fsync of one existing file (its data and size): for files that must be on disk before a
// checkpoint that depends on them is published (the trainers' metrics file).
void sync_file(const std::string& path);

// Steps of the complete checkpoint directories (those with a manifest.json), ascending. Does not
// verify them.
std::vector<int64_t> list_checkpoints(const std::string& workdir);

}  // namespace bv::ckpt
