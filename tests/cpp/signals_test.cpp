// The stop flag that SIGTERM/SIGINT set for the trainers (runtime/core/signals.cpp).
#include <catch2/catch.hpp>

#include <csignal>
#include <string>

#include "core/signals.h"

TEST_CASE("stop signals set the flag, installing the handlers again keeps it, clearing clears it") {
  bv::install_stop_handlers();
  bv::clear_stop_request();
  CHECK_FALSE(bv::stop_requested());
  std::raise(SIGTERM);
  CHECK(bv::stop_requested());
  CHECK(std::string(bv::stop_signal_name()) == "SIGTERM");
  // A request made before the trainer installs the handlers again (during start-up) is kept.
  bv::install_stop_handlers();
  CHECK(bv::stop_requested());
  // A second training run in the same process (a REPL command) must not stop at its first step.
  bv::clear_stop_request();
  CHECK_FALSE(bv::stop_requested());
  CHECK(std::string(bv::stop_signal_name()).empty());
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
}
