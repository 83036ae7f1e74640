// Training checkpoints under faults: a save whose writes fail (a full disk) says which
// checkpoint is intact and leaves nothing behind; files that are there but cannot be read are
// reported as unreadable, not as missing; an edited state with a recomputed checksum is refused
// by its ranges; oversized manifests and LAST files are never read; a stop request ends a resume's
// skip to a far data position. Faults that permission bits make (which root ignores) run in a
// child process that drops to `nobody` first, so they are tested as root (CI) too.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <grp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/index.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "core/signals.h"
#include "data/pipeline.h"
#include "test_util.h"

namespace ck = bv::ckpt;
namespace stdfs = std::filesystem;

using bv::test::contains;
using bv::test::error_of;
using TempDir = bv::test::TempDir;

namespace {

using bv::test::read_bytes;
using bv::test::write_bytes;

ck::NamedTensors tensors_of(int64_t step) {
  return {{"params/w", at::full({4, 3}, static_cast<double>(step), at::kFloat)},
          {"opt/count", at::full(at::IntArrayRef{}, step, at::kLong)}};
}

// The keys the trainers save (lib/bv/trainers/utils.lua), with `position` as data_position.
std::string trainer_state(const std::string& position) {
  return R"({"chrono": {"accum_examples_seen": 40, "accum_train_time": 1.5}, "data_position": )" +
         position + R"(, "world": 1})";
}

std::string dir_of(const std::string& workdir, int64_t step) {
  return workdir + "/" + ck::checkpoint_dir_name(step);
}

// A manifest.json replaced by `text` with manifest.crc32 recomputed: what an edit that knows the
// format looks like (the CRC detects accidents, not tampering).
void forge_manifest(const std::string& dir, const std::string& text) {
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(text.size()));
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc));
  write_bytes(dir + "/manifest.json", text);
  write_bytes(dir + "/manifest.crc32", std::string(hex) + "\n");
}

// A manifest saved with trainer_state("20"), its data_position's value replaced.
std::string with_position(std::string text, const std::string& position) {
  std::string key = "\"data_position\": 20";
  size_t at = text.find(key);
  REQUIRE(at != std::string::npos);
  return text.replace(at, key.size(), "\"data_position\": " + position);
}

// The message of the bv::Error fn throws while files may not grow past `bytes` (RLIMIT_FSIZE,
// which binds root too; SIGXFSZ ignored, so a write past it fails with EFBIG as a full disk fails
// with ENOSPC). No Catch2 macro runs meanwhile: its output may be a file.
std::string error_with_file_limit(rlim_t bytes, const std::function<void()>& fn) {
  struct rlimit old;
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
  struct rlimit limit = {bytes, old.rlim_max};
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &limit) == 0);
  std::string message = "(no error)";
  try {
    fn();
  } catch (const bv::Error& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  return message;
}

// The names in `dir` that hold ".tmp-" (a save's leftovers).
std::vector<std::string> tmp_leftovers(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : stdfs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (contains(name, ".tmp-")) out.push_back(name);
  }
  return out;
}

// What fn returns, run in a child process (killed after 30 s): for faults that must not touch
// this process (a stop request, a dropped uid). A bv::Error becomes its message.
std::string in_child(const std::function<std::string()>& fn) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(30);
    std::string out;
    try {
      out = fn();
    } catch (const std::exception& e) {
      out = e.what();
    }
    for (size_t done = 0; done < out.size();) {
      ssize_t n = ::write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  INFO("child output: " << out);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  return out;
}

// In a child: permission bits bind (root becomes nobody, 65534, first), then fn's error.
// "SKIP: ..." when root cannot drop its privileges here.
std::string error_as_unprivileged(const std::function<void()>& fn) {
  return in_child([&]() -> std::string {
    if (::geteuid() == 0 &&
        (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0)) {
      return std::string("SKIP: cannot become nobody: ") + std::strerror(errno);
    }
    try {
      fn();
    } catch (const bv::Error& e) {
      return e.what();
    }
    return "(no error)";
  });
}

// The peak resident memory of this process so far, in MiB.
long peak_rss_mib() {
  struct rusage ru;
  ::getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024;
}

}  // namespace

TEST_CASE("a save that fails to write says which checkpoint is intact and leaves nothing",
          "[ckpt][checkpoint][faults]") {
  TempDir t;
  std::string w = t / "run";

  // No checkpoint yet: the first save fails.
  std::string msg = error_with_file_limit(
      64, [&] { ck::save_checkpoint(w, 1, tensors_of(1), trainer_state("10"), false); });
  CHECK(contains(msg, "cannot save checkpoint step 1 in '" + w + "'"));
  std::string too_large = ".tmp-" + std::to_string(::getpid()) + "': " + std::strerror(EFBIG);
  CHECK(contains(msg, "tensors.safetensors" + too_large));
  CHECK(contains(msg, "nothing of it is left"));
  CHECK(contains(msg, "there is no earlier checkpoint in '" + w + "' yet"));
  CHECK(tmp_leftovers(w).empty());
  CHECK_FALSE(ck::load_latest_checkpoint(w).has_value());

  ck::save_checkpoint(w, 1, tensors_of(1), trainer_state("20"), false);
  uint64_t tensors_bytes = stdfs::file_size(dir_of(w, 1) + "/tensors.safetensors");
  REQUIRE(stdfs::file_size(dir_of(w, 1) + "/manifest.json") > tensors_bytes);
  std::string intact = "the previous checkpoint, '" + dir_of(w, 1) + "' (step 1), is intact";

  SECTION("the tensors file fails") {
    msg = error_with_file_limit(
        64, [&] { ck::save_checkpoint(w, 2, tensors_of(2), trainer_state("40"), false); });
    CHECK(contains(msg, "cannot save checkpoint step 2"));
    CHECK(contains(msg, "tensors.safetensors" + too_large));
    CHECK(contains(msg, intact));
  }
  SECTION("the manifest fails (the tensors file was written)") {
    msg = error_with_file_limit(tensors_bytes, [&] {
      ck::save_checkpoint(w, 2, tensors_of(2), trainer_state("40"), false);
    });
    CHECK(contains(msg, "manifest.json" + too_large));
    CHECK(contains(msg, intact));
  }
  SECTION("a later checkpoint (one a resume went past) is not the one named") {
    // (A copy under a later step's name: saving one would delete step 1 as an old checkpoint.)
    stdfs::copy(dir_of(w, 1), dir_of(w, 7), stdfs::copy_options::recursive);
    msg = error_with_file_limit(
        64, [&] { ck::save_checkpoint(w, 2, tensors_of(2), trainer_state("40"), false); });
    CHECK(contains(msg, intact));
    stdfs::remove_all(dir_of(w, 7));
  }
  SECTION("re-saving the same step fails: the one of that step is intact") {
    msg = error_with_file_limit(
        64, [&] { ck::save_checkpoint(w, 1, tensors_of(5), trainer_state("50"), true); });
    CHECK(contains(msg, intact));
    auto loaded = ck::load_latest_checkpoint(w, false);
    REQUIRE(loaded);
    CHECK_FALSE(loaded->keep);
  }
  CHECK(tmp_leftovers(w).empty());
  CHECK(read_bytes(w + "/LAST") == "ckpt-000000001\n");
  auto loaded = ck::load_latest_checkpoint(w);
  REQUIRE(loaded);
  CHECK(loaded->step == 1);
  CHECK(loaded->warning.empty());
}

TEST_CASE("a save that fails only to replace LAST says the checkpoint is in place",
          "[ckpt][checkpoint][faults]") {
  TempDir t;
  ck::save_checkpoint(t.path, 1, tensors_of(1), trainer_state("20"), false);
  // LAST's tmp file cannot be created where a directory has its name (root or not).
  stdfs::create_directory(t / ("LAST.tmp-" + std::to_string(::getpid())));
  std::string msg =
      error_of([&] { ck::save_checkpoint(t.path, 2, tensors_of(2), trainer_state("40"), false); });
  CHECK(contains(msg, "checkpoint step 2 is in place as '" + dir_of(t.path, 2) +
                          "', but LAST could not be updated (cannot write '" + t.path + "/LAST'"));
  CHECK(contains(msg, "a resume takes it all the same"));
  stdfs::remove(t / ("LAST.tmp-" + std::to_string(::getpid())));
  auto loaded = ck::load_latest_checkpoint(t.path);
  REQUIRE(loaded);
  CHECK(loaded->step == 2);
  CHECK(contains(loaded->warning, "names ckpt-000000001, but ckpt-000000002 is newer and valid"));
}

TEST_CASE("checkpoint files that are there but cannot be read are unreadable, not missing",
          "[ckpt][checkpoint][faults]") {
  TempDir w;
  ck::save_checkpoint(w.path, 1, tensors_of(1), trainer_state("20"), true);
  ck::save_checkpoint(w.path, 2, tensors_of(2), trainer_state("20"), true);
  std::string dir = dir_of(w.path, 2);
  std::string loop = std::strerror(ELOOP);  // a symlink to itself: unreadable, root or not

  SECTION("manifest.json") {
    stdfs::remove(dir + "/manifest.json");
    stdfs::create_symlink("manifest.json", dir + "/manifest.json");
    std::string msg = error_of([&] { ck::load_checkpoint_dir(dir); });
    CHECK(contains(msg,
                   "checkpoint '" + dir + "': cannot read '" + dir + "/manifest.json': " + loop));
    CHECK_FALSE(contains(msg, "no manifest.json"));
    auto loaded = ck::load_latest_checkpoint(w.path);
    REQUIRE(loaded);
    CHECK(loaded->step == 1);
    CHECK(contains(loaded->warning, "cannot read '" + dir + "/manifest.json': " + loop));
  }
  SECTION("manifest.crc32") {
    stdfs::remove(dir + "/manifest.crc32");
    stdfs::create_symlink("manifest.crc32", dir + "/manifest.crc32");
    std::string msg = error_of([&] { ck::load_checkpoint_dir(dir); });
    CHECK(contains(msg, "cannot read '" + dir + "/manifest.crc32': " + loop));
    CHECK_FALSE(contains(msg, "missing"));
  }
  SECTION("tensors.safetensors") {
    stdfs::remove(dir + "/tensors.safetensors");
    stdfs::create_symlink("tensors.safetensors", dir + "/tensors.safetensors");
    std::string msg = error_of([&] { ck::load_checkpoint_dir(dir); });
    CHECK(contains(msg, "cannot read '" + dir + "/tensors.safetensors': " + loop));
    CHECK_FALSE(contains(msg, "missing"));
  }
  SECTION("LAST") {
    stdfs::remove(w / "LAST");
    stdfs::create_symlink("LAST", w / "LAST");
    auto loaded = ck::load_latest_checkpoint(w.path);
    REQUIRE(loaded);
    CHECK(loaded->step == 2);
    CHECK(contains(loaded->warning,
                   "LAST could not be used (cannot read '" + w.path + "/LAST': " + loop));
    CHECK_FALSE(contains(loaded->warning, "no LAST file"));
  }
  SECTION("a FIFO as manifest.json is refused, not waited on") {
    stdfs::remove(dir + "/manifest.json");
    REQUIRE(::mkfifo((dir + "/manifest.json").c_str(), 0644) == 0);
    CHECK(contains(error_of([&] { ck::load_checkpoint_dir(dir); }),
                   "manifest.json' is not a regular file"));
  }
  SECTION("a directory as manifest.json") {
    stdfs::remove(dir + "/manifest.json");
    stdfs::create_directory(dir + "/manifest.json");
    CHECK(contains(error_of([&] { ck::load_checkpoint_dir(dir); }),
                   "manifest.json' is a directory, not a file"));
  }
}

TEST_CASE("checkpoints that permissions make unreadable are reported with the reason",
          "[ckpt][checkpoint][faults]") {
  TempDir t;
  stdfs::permissions(t.path, stdfs::perms::owner_all | stdfs::perms::group_read |
                                 stdfs::perms::group_exec | stdfs::perms::others_read |
                                 stdfs::perms::others_exec);
  std::string w = t / "run";
  ck::save_checkpoint(w, 1, tensors_of(1), trainer_state("20"), true);
  ck::save_checkpoint(w, 2, tensors_of(2), trainer_state("20"), true);
  std::string dir = dir_of(w, 2), denied = std::strerror(EACCES);
  auto check_reason = [&](const std::string& msg, const std::string& what) {
    INFO(msg);
    if (msg.rfind("SKIP: ", 0) == 0) {
      WARN(msg);
      return;
    }
    CHECK(contains(msg, "cannot read '" + what + "': " + denied));
    CHECK_FALSE(contains(msg, "no manifest.json"));
  };

  SECTION("manifest.json") {
    ::chmod((dir + "/manifest.json").c_str(), 0);
    check_reason(error_as_unprivileged([&] { ck::load_checkpoint_dir(dir, false); }),
                 dir + "/manifest.json");
    // The newest is skipped, named with the reason; the one before it loads.
    std::string note = error_as_unprivileged([&] {
      auto loaded = ck::load_latest_checkpoint(w, false);
      bv::fail("step ", loaded->step, ": ", loaded->warning);
    });
    if (note.rfind("SKIP: ", 0) != 0) {
      CHECK(contains(note, "step 1: "));
      CHECK(contains(note, "checkpoint '" + dir + "': cannot read '" + dir + "/manifest.json"));
    }
    ::chmod((dir + "/manifest.json").c_str(), 0644);
  }
  SECTION("the checkpoint directory") {
    ::chmod(dir.c_str(), 0);
    check_reason(error_as_unprivileged([&] { ck::load_checkpoint_dir(dir, false); }),
                 dir + "/manifest.json");
    ::chmod(dir.c_str(), 0755);
  }
  SECTION("the workdir: an error, never an empty workdir (a run would start over)") {
    ::chmod(w.c_str(), 0);
    std::string msg = error_as_unprivileged([&] {
      if (!ck::load_latest_checkpoint(w, false)) bv::fail("no checkpoint");
    });
    if (msg.rfind("SKIP: ", 0) == 0) {
      WARN(msg);
    } else {
      CHECK(contains(msg, w));
      CHECK(contains(msg, denied));
    }
    ::chmod(w.c_str(), 0755);
  }
}

TEST_CASE("a checkpoint state out of range is refused at load, naming the key and the file",
          "[ckpt][checkpoint][faults]") {
  TempDir w;
  ck::save_checkpoint(w.path, 1, tensors_of(1), trainer_state("20"), true);
  ck::save_checkpoint(w.path, 2, tensors_of(2), trainer_state("20"), true);
  std::string dir = dir_of(w.path, 2);
  auto refusal = [&](const std::string& manifest) {
    forge_manifest(dir, manifest);
    return error_of([&] { ck::load_checkpoint_dir(dir, false); });
  };
  std::string where = "checkpoint '" + dir + "': manifest.json: ";
  std::string manifest = read_bytes(dir + "/manifest.json");

  CHECK(contains(refusal(with_position(manifest, "-5")),
                 where + "state.data_position is -5, not a whole number in [0, 2^53)"));
  CHECK(contains(refusal(with_position(manifest, "9007199254740992")),
                 "state.data_position is 9007199254740992"));
  CHECK(contains(refusal(with_position(manifest, "18446744073709551611")), "state.data_position"));
  CHECK(contains(refusal(with_position(manifest, "1.5")), "state.data_position is 1.5"));
  CHECK(contains(refusal(with_position(manifest, "\"20\"")), "state.data_position is \"20\""));
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string text = manifest;
    size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    return text.replace(at, from.size(), to);
  };
  CHECK(contains(refusal(edited("\"world\": 1", "\"world\": 0")),
                 where + "state.world is 0, not a whole number in [1, 2^31)"));
  CHECK(contains(refusal(edited("\"accum_train_time\": 1.5", "\"accum_train_time\": -1.5")),
                 where + "state.chrono.accum_train_time is -1.5"));
  CHECK(contains(refusal(edited("\"accum_examples_seen\": 40", "\"accum_examples_seen\": 1e300")),
                 "state.chrono.accum_examples_seen"));
  CHECK(contains(refusal(edited("\"chrono\": {", "\"chrono\": 5, \"x\": {")),
                 "state.chrono is not an object"));

  // The newest valid one is taken instead, with a warning naming the key.
  forge_manifest(dir, with_position(manifest, "-5"));
  auto loaded = ck::load_latest_checkpoint(w.path, false);
  REQUIRE(loaded);
  CHECK(loaded->step == 1);
  CHECK(contains(loaded->warning, where + "state.data_position is -5"));

  // The largest position allowed, and a step that is negative (in a directory of another name).
  forge_manifest(dir, with_position(manifest, "9007199254740991"));
  CHECK(ck::load_checkpoint_dir(dir, false).step == 2);
  stdfs::rename(dir, w / "elsewhere");
  forge_manifest(w / "elsewhere", edited("\"step\": 2", "\"step\": -2"));
  CHECK(contains(error_of([&] { ck::load_checkpoint_dir(w / "elsewhere", false); }),
                 "manifest.json: step -2 is negative"));
}

TEST_CASE("oversized manifests and LAST files are never read whole", "[ckpt][checkpoint][faults]") {
  TempDir w;
  ck::save_checkpoint(w.path, 1, tensors_of(1), trainer_state("20"), true);
  ck::save_checkpoint(w.path, 2, tensors_of(2), trainer_state("20"), true);
  long before = peak_rss_mib();
  auto check_bounded = [&] {
    long grown = peak_rss_mib() - before;
    INFO("peak resident memory grew by " << grown << " MiB");
    CHECK(grown < 32);
  };
  std::string limit = "over the limit of " + std::to_string(ck::kMaxManifestBytes) + " bytes";

  SECTION("an old checkpoint's manifest at a save (retention)") {
    // Sparse and huge: retention reads every other manifest for its keep mark.
    std::string manifest = dir_of(w.path, 1) + "/manifest.json";
    stdfs::resize_file(manifest, ck::kMaxManifestBytes + (uint64_t(40) << 20));
    auto warnings = ck::save_checkpoint(w.path, 3, tensors_of(3), trainer_state("20"), false);
    check_bounded();
    REQUIRE(warnings.size() == 1);
    CHECK(contains(warnings[0],
                   "left checkpoint '" + dir_of(w.path, 1) + "' in place: '" + manifest + "' is "));
    CHECK(contains(warnings[0], limit));
    CHECK(stdfs::exists(dir_of(w.path, 1)));
    // The loader and the index refuse it the same way.
    CHECK(contains(error_of([&] { ck::load_checkpoint_dir(dir_of(w.path, 1)); }), limit));
    CHECK(ck::CheckpointIndex::open(dir_of(w.path, 1)).step() == -1);
  }
  SECTION("LAST") {
    stdfs::resize_file(w / "LAST", uint64_t(100) << 20);
    std::string last_limit = "'" + w.path + "/LAST' is 104857600 bytes, over the limit of " +
                             std::to_string(ck::kMaxNameFileBytes) + " bytes";
    auto loaded = ck::load_latest_checkpoint(w.path, false);
    check_bounded();
    REQUIRE(loaded);
    CHECK(loaded->step == 2);
    CHECK(contains(loaded->warning, "LAST could not be used (" + last_limit));
    CHECK(contains(error_of([&] { ck::CheckpointIndex::open(w.path); }), last_limit));
  }
  SECTION("manifest.crc32") {
    stdfs::resize_file(dir_of(w.path, 2) + "/manifest.crc32", uint64_t(100) << 20);
    CHECK(contains(error_of([&] { ck::load_checkpoint_dir(dir_of(w.path, 2)); }),
                   "manifest.crc32' is 104857600 bytes, over the limit"));
  }
  check_bounded();
}

TEST_CASE("a stop request ends a resume's skip to a far data position", "[ckpt][data][faults]") {
  // In a child: the stop flag, once raised, stays raised in its process.
  std::string msg = in_child([] {
    bv::install_stop_handlers();
    std::raise(SIGTERM);
    using namespace bv::data;
    ItemStream stream({IndexStream({0, 1, 2}, 0, false, 0, true)}, {1.0}, 0);
    WorkerFactory factory = [](int) -> WorkerFn { return [](const Item&) { return Example(); }; };
    Pipeline pipeline(std::move(stream), factory, PipelineOptions(), uint64_t(1) << 62);
    return std::string("(no error)");
  });
  CHECK(contains(msg, "stopped (SIGTERM) while skipping to data position 4611686018427387904"));
}
