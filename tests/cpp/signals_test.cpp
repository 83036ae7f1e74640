// The stop flag that SIGTERM/SIGINT set for the trainers (runtime/core/signals.cpp).
#include <catch2/catch.hpp>

#include <csignal>
#include <string>

#include "core/signals.h"

TEST_CASE("stop signals set the flag, and installing the handlers again clears it") {
  bv::install_stop_handlers();
  CHECK_FALSE(bv::stop_requested());
  std::raise(SIGTERM);
  CHECK(bv::stop_requested());
  CHECK(std::string(bv::stop_signal_name()) == "SIGTERM");
  // A second training run in the same process (the REPL) must not stop at its first step.
  bv::install_stop_handlers();
  CHECK_FALSE(bv::stop_requested());
  CHECK(std::string(bv::stop_signal_name()).empty());
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
}
