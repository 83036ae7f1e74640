#include "data/tf_example.h"

#include <ATen/ATen.h>

#include <cstring>
#include <map>
#include <vector>

#include "core/error.h"
#include "core/quote.h"

namespace bv::data {

namespace {

enum WireType { kVarint = 0, kFixed64 = 1, kLen = 2, kStartGroup = 3, kEndGroup = 4, kFixed32 = 5 };

// Reads one message's fields. `what` names the message in errors ("Features", "feature 'x'").
class Wire {
 public:
  Wire(std::string_view bytes, const std::string& where, std::string what)
      : p_(bytes), where_(where), what_(std::move(what)) {}

  bool done() const { return p_.empty(); }

  // The next field's number and wire type.
  void tag(uint64_t* field, int* type) {
    uint64_t t = varint("a field tag");
    *field = t >> 3;
    *type = static_cast<int>(t & 7);
    if (*field == 0 || *field > 0x1fffffff) bad("field number ", *field, " is out of range");
    if (*type > kFixed32) bad("field ", *field, " has wire type ", *type, ", which does not exist");
  }

  uint64_t varint(const char* what) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_.empty()) bad(what, " (a varint) runs past the end");
      auto b = static_cast<unsigned char>(p_[0]);
      p_.remove_prefix(1);
      if (shift == 63 && b > 1) bad(what, " (a varint) does not fit in 64 bits");
      v |= uint64_t{b & 0x7fu} << shift;
      if (!(b & 0x80)) return v;
    }
    bad(what, " (a varint) is longer than 10 bytes");
  }

  std::string_view take(uint64_t n, const char* what) {
    if (n > p_.size()) bad(what, " of ", n, " bytes runs past the end (", p_.size(), " left)");
    std::string_view out = p_.substr(0, n);
    p_.remove_prefix(n);
    return out;
  }

  std::string_view len_delimited(const char* what) { return take(varint("a length"), what); }

  float fixed32_float() {
    std::string_view b = take(4, "a float");
    uint32_t u = 0;
    for (int k = 3; k >= 0; --k) u = u << 8 | static_cast<unsigned char>(b[k]);
    float f = 0;
    std::memcpy(&f, &u, 4);
    return f;
  }

  // Passes over a field of wire type `type` (an unknown one), groups included.
  void skip(uint64_t field, int type, int depth = 0) {
    switch (type) {
      case kVarint: varint("an unknown field"); break;
      case kFixed64: take(8, "an unknown fixed64 field"); break;
      case kLen: len_delimited("an unknown field"); break;
      case kFixed32: take(4, "an unknown fixed32 field"); break;
      case kStartGroup: {
        if (depth >= 64) bad("groups nest more than 64 deep");
        while (true) {
          if (done()) bad("group ", field, " has no end");
          uint64_t f = 0;
          int t = 0;
          tag(&f, &t);
          if (t == kEndGroup) {
            if (f != field) bad("group ", field, " ends as group ", f);
            return;
          }
          skip(f, t, depth + 1);
        }
      }
      default: bad("an end of group ", field, " with no start");
    }
  }

  // Fails unless field `field` has wire type `want`.
  void expect(uint64_t field, int type, int want, const char* name) {
    if (type != want)
      bad("field ", field, " (", name, ") has wire type ", type, ", expected ", want);
  }

  template <typename... Parts>
  [[noreturn]] void bad(const Parts&... parts) const {
    fail(where_, ": malformed tf.train.Example: in ", what_, ": ", parts...);
  }

 private:
  std::string_view p_;
  const std::string& where_;
  std::string what_;
};

enum class Kind { kNone, kBytes, kFloat, kInt64 };

struct Feature {
  Kind kind = Kind::kNone;
  std::vector<std::string> bytes;
  std::vector<float> floats;
  std::vector<int64_t> ints;

  // A oneof: a new kind replaces what came before; the same kind again merges (appends).
  void become(Kind k) {
    if (kind == k) return;
    *this = Feature();
    kind = k;
  }
};

// The values of a BytesList, FloatList or Int64List: field 1, repeated. A value given on its own
// (wire type `single`; none for bytes) is read by one(w), a length-delimited field (a packed run
// of numbers, or one bytes value) by packed(w).
template <typename One, typename Packed>
void parse_list(Wire w, int single, const char* name, const One& one, const Packed& packed) {
  while (!w.done()) {
    uint64_t f = 0;
    int t = 0;
    w.tag(&f, &t);
    if (f != 1) {
      w.skip(f, t);
      continue;
    }
    if (t == single) {
      one(w);
      continue;
    }
    w.expect(f, t, kLen, name);
    packed(w);
  }
}

void parse_bytes_list(Wire w, Feature* out) {
  parse_list(
      w, -1, "BytesList.value", [](Wire&) {},
      [&](Wire& in) { out->bytes.emplace_back(in.len_delimited("a bytes value")); });
}

void parse_float_list(Wire w, Feature* out, const std::string& where, const std::string& what) {
  parse_list(
      w, kFixed32, "FloatList.value", [&](Wire& in) { out->floats.push_back(in.fixed32_float()); },
      [&](Wire& in) {
        std::string_view packed = in.len_delimited("packed floats");
        if (packed.size() % 4 != 0) {
          in.bad("packed floats of ", packed.size(), " bytes (not 4 each)");
        }
        Wire values(packed, where, what);
        while (!values.done()) out->floats.push_back(values.fixed32_float());
      });
}

void parse_int64_list(Wire w, Feature* out, const std::string& where, const std::string& what) {
  parse_list(
      w, kVarint, "Int64List.value",
      [&](Wire& in) { out->ints.push_back(static_cast<int64_t>(in.varint("an int64 value"))); },
      [&](Wire& in) {
        Wire values(in.len_delimited("packed int64s"), where, what);
        while (!values.done()) out->ints.push_back(static_cast<int64_t>(values.varint("an int64")));
      });
}

void parse_feature(std::string_view bytes, const std::string& where, const std::string& what,
                   Feature* out) {
  Wire w(bytes, where, what);
  while (!w.done()) {
    uint64_t f = 0;
    int t = 0;
    w.tag(&f, &t);
    if (f < 1 || f > 3) {
      w.skip(f, t);
      continue;
    }
    static const char* const names[] = {"", "bytes_list", "float_list", "int64_list"};
    w.expect(f, t, kLen, names[f]);
    std::string_view list = w.len_delimited(names[f]);
    if (f == 1) {
      out->become(Kind::kBytes);
      parse_bytes_list(Wire(list, where, what), out);
    } else if (f == 2) {
      out->become(Kind::kFloat);
      parse_float_list(Wire(list, where, what), out, where, what);
    } else {
      out->become(Kind::kInt64);
      parse_int64_list(Wire(list, where, what), out, where, what);
    }
  }
}

// One map entry of Features: {1: key, 2: Feature}.
void parse_entry(std::string_view bytes, const std::string& where,
                 std::map<std::string, Feature>* features) {
  Wire w(bytes, where, "a Features entry");
  std::string key;
  std::vector<std::string_view> values;  // parsed once the key is known (it may come last)
  while (!w.done()) {
    uint64_t f = 0;
    int t = 0;
    w.tag(&f, &t);
    if (f == 1) {
      w.expect(f, t, kLen, "key");
      key = std::string(w.len_delimited("the key"));
    } else if (f == 2) {
      w.expect(f, t, kLen, "value");
      values.push_back(w.len_delimited("the Feature"));
    } else {
      w.skip(f, t);
    }
  }
  Feature feature;  // a key given twice: the last entry wins, as in protobuf's maps
  for (std::string_view v : values) {
    parse_feature(v, where, "feature '" + snippet(key) + "'", &feature);
  }
  (*features)[key] = std::move(feature);
}

Value to_value(Feature& f) {
  switch (f.kind) {
    case Kind::kBytes: {
      if (f.bytes.size() == 1) return Value::string(std::move(f.bytes[0]));
      Value list;
      list.kind = Value::Kind::kList;
      for (auto& b : f.bytes) list.list.push_back(Value::string(std::move(b)));
      return list;
    }
    case Kind::kInt64:
      if (f.ints.size() == 1) return Value::integer(f.ints[0]);
      return Value::of_tensor(at::tensor(f.ints, at::kLong));
    case Kind::kFloat:
      if (f.floats.size() == 1) return Value::number(f.floats[0]);
      return Value::of_tensor(at::tensor(f.floats, at::kFloat));
    case Kind::kNone: break;
  }
  return Value::of_tensor(at::empty({0}, at::kFloat));  // tf.constant([]) is float32 too
}

}  // namespace

Example parse_tf_example(std::string_view bytes, const std::string& where) {
  std::map<std::string, Feature> features;
  Wire example(bytes, where, "Example");
  while (!example.done()) {
    uint64_t f = 0;
    int t = 0;
    example.tag(&f, &t);
    if (f != 1) {
      example.skip(f, t);
      continue;
    }
    example.expect(f, t, kLen, "features");
    // A message field given twice merges: its map entries add up.
    Wire feats(example.len_delimited("features"), where, "Features");
    while (!feats.done()) {
      uint64_t g = 0;
      int u = 0;
      feats.tag(&g, &u);
      if (g != 1) {
        feats.skip(g, u);
        continue;
      }
      feats.expect(g, u, kLen, "feature");
      parse_entry(feats.len_delimited("a feature entry"), where, &features);
    }
  }
  Example ex;
  ex.reserve(features.size());
  for (auto& [key, feature] : features) ex.emplace_back(key, to_value(feature));
  return ex;
}

}  // namespace bv::data
