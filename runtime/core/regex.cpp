#include "core/regex.h"

#include <map>
#include <mutex>
#include <regex>

#include "core/error.h"

namespace bv {

bool regex_fullmatch(const std::string& pattern, const std::string& text) {
  // Compiling a std::regex is slow; configs reuse a handful of patterns, so keep them.
  static std::mutex mu;
  static std::map<std::string, std::regex> cache;
  const std::regex* re;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(pattern);
    if (it == cache.end()) {
      try {
        it = cache.emplace(pattern, std::regex(pattern, std::regex::ECMAScript)).first;
      } catch (const std::regex_error& e) {
        fail("bad regex '", pattern, "': ", e.what());
      }
    }
    re = &it->second;
  }
  return std::regex_match(text, *re);
}

}  // namespace bv
