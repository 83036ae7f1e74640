// Reading big_vision's optimizer options out of JSON config objects. big_vision passes these
// dicts as Python **kwargs, so a key nobody reads is a TypeError there; here it is a bv::Error
// that names the key and the place (`what`, e.g. "schedule[2]" or "optax").
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <vector>

namespace bv::optim {

// Throws unless every key of `obj` (an object, or null for none) is in `known`.
void check_keys(const nlohmann::json& obj, const std::vector<std::string>& known,
                const std::string& what);

// Present and not null.
bool has_value(const nlohmann::json& obj, const std::string& key);

// A number (integers allowed); `fallback` when absent or null.
double get_number(const nlohmann::json& obj, const std::string& key, double fallback,
                  const std::string& what);
// A number, or nothing when absent or null (Python's None).
std::optional<double> get_optional_number(const nlohmann::json& obj, const std::string& key,
                                          const std::string& what);
bool get_bool(const nlohmann::json& obj, const std::string& key, bool fallback,
              const std::string& what);
std::string get_string(const nlohmann::json& obj, const std::string& key,
                       const std::string& fallback, const std::string& what);

// A JSON list of [regex, number] pairs (lr_mults, wd_mults); an empty object counts as an empty
// list because Lua cannot tell {} from [].
std::vector<std::pair<std::string, double>> get_regex_mults(const nlohmann::json& value,
                                                            const std::string& what);

}  // namespace bv::optim
