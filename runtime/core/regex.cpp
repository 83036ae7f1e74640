#include "core/regex.h"

#include <map>
#include <mutex>
#include <regex>
#include <vector>

#include "core/error.h"

namespace bv {

namespace {

// Compiling a std::regex is slow; configs reuse a handful of patterns, so keep them.
const std::regex& compiled(const std::string& pattern) {
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
  return *re;
}

}  // namespace

bool regex_fullmatch(const std::string& pattern, const std::string& text) {
  return std::regex_match(text, compiled(pattern));
}

bool regex_match_prefix(const std::string& pattern, const std::string& text,
                        std::vector<std::string>* groups) {
  std::smatch m;
  if (!std::regex_search(text, m, compiled(pattern), std::regex_constants::match_continuous)) {
    return false;
  }
  if (groups) {
    groups->clear();
    for (const auto& g : m) groups->push_back(g.str());
  }
  return true;
}

}  // namespace bv
