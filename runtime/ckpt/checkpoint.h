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
// CRC-32 against manifest.crc32 (version 2), format, version, an integer step >= 0 that matches
// the directory name, the "state" (required), the ranges of the trainers' state keys (below),
// and the tensors file's size and CRC-32 against the manifest's. Any failure is a bv::Error
// naming the directory and what failed. A file that is there but cannot be read (permissions,
// I/O) is reported as unreadable with the system's reason, never as missing.
//
// manifest.crc32 detects accidents (a torn write, a flipped bit, an editor that saved half a
// file), not tampering: a CRC is no signature, and anyone can edit the manifest and recompute it.
// So the state is range-checked as well: where the trainers' keys are present, data_position is
// an integer in [0, 2^53) (a resume skips that many examples), world an integer in [1, 2^31),
// and chrono's accumulators numbers >= 0 (accum_examples_seen below 2^53 too). A bad value is a
// failed checkpoint naming the key and manifest.json.
//
// Every reader of a checkpoint's files (the loader, retention, ckpt/index.h) bounds what it reads
// whole: manifest.json to kMaxManifestBytes, LAST and manifest.crc32 to kMaxNameFileBytes; a
// larger file is an error (or a warning) naming it and the limit, and is never read.
//
// Save writes ckpt-<step>.tmp-<pid>/, fsyncs its files and the directory, renames it into place
// (atomically swapping out an existing same-step directory), fsyncs WORKDIR, then replaces LAST
// through a temporary file (fsync + rename + fsync). A process killed at any moment leaves the
// previous checkpoint and LAST intact; its *.tmp-<pid> leftovers are ignored by the loader and
// removed by the next save once that pid is gone. A kill between the rename and LAST's update
// leaves LAST naming the previous checkpoint: the loader takes the newer one (below). A save
// that fails (a full disk: any failed write, sync or rename) removes its tmp directory and
// throws an error that says so and names the previous checkpoint, intact, or says there is none
// yet; one that fails only to replace LAST says the new checkpoint is in place all the same.
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
// would otherwise win over the run's newer history). Directories without a manifest are left
// alone; so are those whose manifest cannot be read, parsed or is over the limit, each named in
// a returned warning.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace bv::ckpt {

// What a reader of a checkpoint's files reads whole, at most (see the top of this file).
inline constexpr uint64_t kMaxManifestBytes = uint64_t(256) << 20;  // manifest.json
inline constexpr uint64_t kMaxNameFileBytes = 4096;                 // LAST, manifest.crc32

// A checkpoint's file read whole: nullopt when it does not exist (ENOENT); a bv::Error naming
// the path otherwise: unreadable (with strerror), not a regular file (a directory, a FIFO: never
// waited on), or over `limit` bytes (then not read at all).
std::optional<std::string> read_checkpoint_file(const std::string& path, uint64_t limit);

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
// some but none is valid, and an error when WORKDIR is there but cannot be read or listed (never
// taken for an empty one: a run would start over).
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
