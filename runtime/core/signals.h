// SIGTERM and SIGINT as a request to stop: the trainer checks it between steps, saves a
// checkpoint and exits, instead of dying mid-step (preemption on clusters sends SIGTERM).
#pragma once

namespace bv {

// SIGTERM and SIGINT set the flag (cleared here); a second SIGINT kills as usual.
void install_stop_handlers();
bool stop_requested();
const char* stop_signal_name();  // "SIGTERM", "SIGINT" or ""

}  // namespace bv
