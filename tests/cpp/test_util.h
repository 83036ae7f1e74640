// Small helpers shared by the Catch2 tests.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "core/error.h"

namespace bv::test {

// The message of the bv::Error that fn throws ("" and a test failure when it throws none).
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const bv::Error& e) {
    return e.what();
  }
  FAIL_CHECK("expected a bv::Error");
  return "";
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace bv::test
