// Python-style regex matching for config regexes (dont_load, schedules, lr_mults): big_vision
// uses re.fullmatch; std::regex's ECMAScript grammar reads the patterns people write there
// ('.*', 'img/.*', '(a|b)/.*kernel') the same way.
#pragma once

#include <string>
#include <vector>

namespace bv {

// True when `pattern` matches the whole of `text`. A bad pattern is a bv::Error naming it.
bool regex_fullmatch(const std::string& pattern, const std::string& text);

// Python's re.match: `pattern` matches a prefix of `text` (maybe all of it). On a match, `groups`
// (if given) gets the matched prefix then each group ("" for one that did not take part).
bool regex_match_prefix(const std::string& pattern, const std::string& text,
                        std::vector<std::string>* groups = nullptr);

}  // namespace bv
