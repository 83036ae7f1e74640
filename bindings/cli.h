// The pieces of bvlua's command line that need no libtorch: the usage text, the --threads rule
// and --version. Shared by the launcher (bindings/launcher.cpp, the `bvlua` executable, which
// answers --help and --version itself) and bvlua-core (bindings/main.cpp, everything else), so
// that both say the same; nothing here includes or links libtorch.
#pragma once

#include <string>

namespace bv {

inline constexpr const char* kUsage =
    "usage: bvlua [--threads N] COMMAND [ARGS...]\n"
    "\n"
    "commands:\n"
    "  run SCRIPT.lua [ARGS...]   run a Lua script (its arguments in `arg`, as lua does)\n"
    "  -e CODE                    run a chunk of Lua\n"
    "  train CONFIG[:ARGS] --workdir DIR [--config.KEY=VALUE ...] [--dry-run]\n"
    "                             train (and evaluate) as the config says: the classification\n"
    "                             or PaliGemma trainer (`bvlua train --help`)\n"
    "  repl [WORKDIR|CHECKPOINT]  an interactive Lua prompt; opens a run or a checkpoint\n"
    "  attach WORKDIR             a Lua prompt inside the `bvlua train` running there: read,\n"
    "                             pause, save, evaluate, change the lr (`bvlua attach --help`)\n"
    "  runs DIR...                one row per run: the config values that differ, steps, the\n"
    "                             last and best value of a metric (`bvlua runs --help`)\n"
    "  sweep SWEEP.lua | CONFIG --workdir DIR --grid KEY=V1,V2 ...\n"
    "                             config variants as a queue, N at a time (`bvlua sweep --help`)\n"
    "  plot DIR... [-o FILE.png]  the tutorial's curves from the runs' metrics files\n"
    "  mistakes OUTFILE.json DATA.jsonl [-o FILE.png]\n"
    "                             a contact sheet of an evaluator's wrong answers\n"
    "  launch --nproc N [--port P] [--grace S] [--] COMMAND [ARGS...]\n"
    "                             run `bvlua COMMAND ARGS...` as N ranks of one process group\n"
    "\n"
    "options:\n"
    "  --threads N   libtorch intra-op threads (default: $BV_THREADS or all cores); also after\n"
    "                train, repl, runs, sweep, plot and mistakes\n"
    "  --version     print the versions of bvlua and libtorch, whether CUDA and NCCL are compiled\n"
    "                in and whether a GPU is available now\n"
    "  -h, --help    this text; `bvlua COMMAND --help` for a command\n";

// --threads N and $BV_THREADS: an integer in [1, 4096].
bool parse_threads(const std::string& text, int* out);

// `bvlua --version`: bvlua's and libtorch's versions, whether CUDA and NCCL are compiled in,
// whether a GPU is available now, and the device `bvlua train` picks by default.
void print_version();

}  // namespace bv
