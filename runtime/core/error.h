// bv::Error and BV_CHECK: how runtime code reports a bad input. The message must name the
// culprit (op, key, file, shape) because it is what the user reads at the Lua prompt.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace bv {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Concatenates anything that has operator<< into one string.
template <typename... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw Error(::bv::str(parts...));  // qualified: c10::str would also match by ADL
}

}  // namespace bv

#define BV_CHECK(cond, ...)               \
  do {                                    \
    if (!(cond)) ::bv::fail(__VA_ARGS__); \
  } while (0)
