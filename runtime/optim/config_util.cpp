#include "optim/config_util.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "core/error.h"
#include "core/quote.h"

namespace bv::optim {

using nlohmann::json;

void check_keys(const json& obj, const std::vector<std::string>& known, const std::string& what) {
  if (obj.is_null()) return;
  BV_CHECK(obj.is_object(), what, " must be an object, got ", snippet(obj.dump()));
  for (const auto& item : obj.items()) {
    if (std::find(known.begin(), known.end(), item.key()) != known.end()) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    fail(what, ": unknown key '", item.key(), "' (known: ", list.empty() ? "none" : list, ")");
  }
}

bool has_value(const json& obj, const std::string& key) {
  if (!obj.is_object()) return false;
  auto it = obj.find(key);
  return it != obj.end() && !it->is_null();
}

std::optional<double> get_optional_number(const json& obj, const std::string& key,
                                          const std::string& what) {
  if (!has_value(obj, key)) return std::nullopt;
  const json& v = obj.at(key);
  BV_CHECK(v.is_number(), what, ".", key, " must be a number, got ", snippet(v.dump()));
  return v.get<double>();
}

double get_number(const json& obj, const std::string& key, double fallback,
                  const std::string& what) {
  return get_optional_number(obj, key, what).value_or(fallback);
}

bool get_bool(const json& obj, const std::string& key, bool fallback, const std::string& what) {
  if (!has_value(obj, key)) return fallback;
  const json& v = obj.at(key);
  BV_CHECK(v.is_boolean(), what, ".", key, " must be true or false, got ", snippet(v.dump()));
  return v.get<bool>();
}

std::string get_string(const json& obj, const std::string& key, const std::string& fallback,
                       const std::string& what) {
  if (!has_value(obj, key)) return fallback;
  const json& v = obj.at(key);
  BV_CHECK(v.is_string(), what, ".", key, " must be a string, got ", snippet(v.dump()));
  return v.get<std::string>();
}

std::vector<std::pair<std::string, double>> get_regex_mults(const json& value,
                                                            const std::string& what) {
  std::vector<std::pair<std::string, double>> out;
  if (value.is_null() || (value.is_object() && value.empty())) return out;
  BV_CHECK(value.is_array(), what, " must be a list of [regex, multiplier] pairs, got ",
           snippet(value.dump()));
  for (size_t i = 0; i < value.size(); ++i) {
    const json& e = value[i];
    BV_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_number(), what, "[",
             i + 1, "] must be a [regex, number] pair, got ", snippet(e.dump()));
    out.emplace_back(e[0].get<std::string>(), e[1].get<double>());
  }
  return out;
}

}  // namespace bv::optim
