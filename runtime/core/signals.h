// SIGTERM and SIGINT as a request to stop: the trainer checks it between steps, saves a
// checkpoint and exits, instead of dying mid-step (preemption on clusters sends SIGTERM).
#pragma once

namespace bv {

void install_stop_handlers();  // SIGTERM and SIGINT set the flag; a second SIGINT kills as usual
bool stop_requested();
const char* stop_signal_name();  // "SIGTERM", "SIGINT" or ""

}  // namespace bv
