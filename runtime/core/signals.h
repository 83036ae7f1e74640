// SIGTERM and SIGINT as a request to stop: the trainer checks it between steps, saves a
// checkpoint and exits, instead of dying mid-step (preemption on clusters sends SIGTERM).
//
// No window at start-up: the `bvlua` launcher blocks both signals before it execs bvlua-core,
// which installs the handlers for `train` and `sweep` and only then unblocks them
// (release_stop_signals), so a signal that arrives while libtorch loads is held pending and
// becomes a stop request, never a death that leaves a half-written file behind.
#pragma once

namespace bv {

// SIGTERM and SIGINT set the flag; a second SIGINT kills as usual. A request made before
// (e.g. during start-up) is kept.
void install_stop_handlers();
void clear_stop_request();  // a new run in the same process (a REPL command) starts unstopped
bool stop_requested();
const char* stop_signal_name();  // "SIGTERM", "SIGINT" or ""

// What the handler tells the user at once (on the process that talks to the terminal): at the
// first signal, what will happen ("stopping after step N ... with a checkpoint; Ctrl-C again to
// stop at once without saving"); at a second SIGINT, what is kept ("the last checkpoint is step
// M"). stop_progress keeps it current: the step under way (-1: not training yet) and the last
// checkpoint's step (-1: none).
void stop_announcements(bool on);
void stop_progress(long step, long saved_step);

// Unblocks SIGTERM and SIGINT (blocked by the launcher across exec); with `handle`, the stop
// handlers are installed first, so that a signal held pending becomes a stop request.
void release_stop_signals(bool handle);

}  // namespace bv
