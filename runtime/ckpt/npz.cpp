#include "ckpt/npz.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <set>

#include "ckpt/zip.h"
#include "core/error.h"
#include "core/tensor_util.h"

namespace bv::ckpt {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "npz reading/writing assumes a little-endian host (numpy writes '<' data)");

namespace {

// numpy refuses headers longer than this (format._MAX_HEADER_SIZE) because it evals them; our
// parser is safe, but nothing honest is longer, so the same cap bounds what we read.
constexpr uint64_t kMaxHeaderLen = 10000;
constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

// How an array's bytes in the file become a tensor.
struct NpyType {
  c10::ScalarType type;  // of the returned tensor
  c10::ScalarType raw;   // what the bytes are read as (differs only for widened unsigned types)
  size_t itemsize;
  bool swap;         // big-endian in the file
  const char* name;  // the file's element type, for messages
};

[[noreturn]] void unknown_descr(const std::string& where, const std::string& descr) {
  fail(where, "unsupported dtype descr '", descr,
       "' (supported: <f2 <f4 <f8 |V2 (bfloat16) |b1 |i1 |u1 <i2 <i4 <i8 <u2 <u4 <u8, and their "
       "'>' big-endian forms)");
}

NpyType parse_descr(const std::string& where, const std::string& descr) {
  if (descr.size() < 2) unknown_descr(where, descr);
  char order = descr[0];
  std::string code = descr;
  if (order == '<' || order == '>' || order == '|' || order == '=') {
    code = descr.substr(1);
  } else {
    order = '=';
  }
  struct Known {
    const char* code;
    c10::ScalarType type, raw;
    size_t itemsize;
    const char* name;
  };
  static const Known kKnown[] = {
      {"f2", at::kHalf, at::kHalf, 2, "float16"},
      {"f4", at::kFloat, at::kFloat, 4, "float32"},
      {"f8", at::kDouble, at::kDouble, 8, "float64"},
      {"V2", at::kBFloat16, at::kBFloat16, 2, "bfloat16"},
      {"b1", at::kBool, at::kBool, 1, "bool"},
      {"i1", at::kChar, at::kChar, 1, "int8"},
      {"u1", at::kByte, at::kByte, 1, "uint8"},
      {"i2", at::kShort, at::kShort, 2, "int16"},
      {"i4", at::kInt, at::kInt, 4, "int32"},
      {"i8", at::kLong, at::kLong, 8, "int64"},
      {"u2", at::kInt, at::kShort, 2, "uint16"},
      {"u4", at::kLong, at::kInt, 4, "uint32"},
      {"u8", at::kLong, at::kLong, 8, "uint64"},
  };
  for (const Known& k : kKnown) {
    if (code != k.code) continue;
    // bfloat16 travels as raw void bytes: a '>' there would be a different, unknown convention.
    if (code == "V2" && order == '>') unknown_descr(where, descr);
    return {k.type, k.raw, k.itemsize, order == '>' && k.itemsize > 1, k.name};
  }
  unknown_descr(where, descr);
}

const char* descr_for(c10::ScalarType type) {
  switch (type) {
    case at::kFloat: return "<f4";
    case at::kDouble: return "<f8";
    case at::kHalf: return "<f2";
    case at::kBFloat16: return "|V2";  // big_vision's recover_dtype reads void-2 as bfloat16
    case at::kBool: return "|b1";
    case at::kChar: return "|i1";
    case at::kByte: return "|u1";
    case at::kShort: return "<i2";
    case at::kInt: return "<i4";
    case at::kLong: return "<i8";
    default: return nullptr;
  }
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// --- the .npy header dict: a strict parser for exactly what numpy writes ------------------------
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 5), }
// Keys and strings in ' or " quotes (no escapes), True/False, tuples of non-negative integers
// (Python 2's 3L accepted), optional trailing commas, whitespace between tokens. Nothing is
// evaluated; anything else is an error.

struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& where) : s_(text), where_(where) {}

  Header parse() {
    Header h;
    std::set<std::string> seen;
    skip_ws();
    expect('{');
    while (true) {
      skip_ws();
      if (peek() == '}') break;
      std::string key = string_literal("a key");
      BV_CHECK(seen.insert(key).second, where_, "npy header: key '", key, "' appears twice");
      skip_ws();
      expect(':');
      skip_ws();
      if (key == "descr") {
        if (peek() == '[') bad("structured dtypes (a list descr) are not supported");
        h.descr = string_literal("the descr string");
      } else if (key == "fortran_order") {
        h.fortran_order = boolean();
      } else if (key == "shape") {
        h.shape = shape();
      } else {
        bad("unexpected key '" + key + "' (an npy header has only descr, fortran_order, shape)");
      }
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      skip_ws();
      BV_CHECK(peek() == '}', where_, "npy header: expected ',' or '}' at column ", pos_ + 1,
               " in ", quoted());
    }
    ++pos_;
    skip_ws();
    BV_CHECK(pos_ == s_.size(), where_, "npy header: text after the closing '}' in ", quoted());
    for (const char* key : {"descr", "fortran_order", "shape"})
      BV_CHECK(seen.count(key), where_, "npy header: no '", key, "' in ", quoted());
    return h;
  }

 private:
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  std::string quoted() const {
    std::string t = s_.size() > 200 ? s_.substr(0, 200) + "..." : s_;
    while (!t.empty() && (t.back() == ' ' || t.back() == '\n')) t.pop_back();
    return "'" + t + "'";
  }
  [[noreturn]] void bad(const std::string& what) const {
    fail(where_, "npy header: ", what, " in ", quoted());
  }
  void expect(char c) {
    if (peek() != c) bad(str("expected '", c, "' at column ", pos_ + 1));
    ++pos_;
  }
  std::string string_literal(const char* what) {
    char q = peek();
    if (q != '\'' && q != '"') bad(str("expected ", what, " at column ", pos_ + 1));
    size_t end = s_.find(q, pos_ + 1);
    if (end == std::string::npos) bad("unterminated string");
    std::string v = s_.substr(pos_ + 1, end - pos_ - 1);
    if (v.find_first_of("\\\n") != std::string::npos) bad("escapes in strings are not supported");
    pos_ = end + 1;
    return v;
  }
  bool boolean() {
    for (bool v : {true, false}) {
      std::string word = v ? "True" : "False";
      if (s_.compare(pos_, word.size(), word) == 0) {
        pos_ += word.size();
        return v;
      }
    }
    bad(str("fortran_order must be True or False (column ", pos_ + 1, ")"));
  }
  int64_t integer() {
    if (peek() == '-') bad("negative dimension");
    if (!std::isdigit(static_cast<unsigned char>(peek())))
      bad(str("expected a dimension at column ", pos_ + 1));
    if (peek() == '0' && pos_ + 1 < s_.size() &&
        std::isdigit(static_cast<unsigned char>(s_[pos_ + 1])))
      bad("dimension with a leading zero");
    int64_t v = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      int digit = s_[pos_++] - '0';
      if (v > (std::numeric_limits<int64_t>::max() - digit) / 10) bad("dimension too large");
      v = v * 10 + digit;
    }
    if (peek() == 'L' || peek() == 'l') ++pos_;  // Python 2 longs
    return v;
  }
  std::vector<int64_t> shape() {
    if (peek() != '(') bad("shape must be a tuple");
    ++pos_;
    std::vector<int64_t> dims;
    bool trailing_comma = false;
    skip_ws();
    while (peek() != ')') {
      dims.push_back(integer());
      skip_ws();
      trailing_comma = false;
      if (peek() == ',') {
        ++pos_;
        trailing_comma = true;
        skip_ws();
      } else if (peek() != ')') {
        bad(str("expected ',' or ')' in the shape at column ", pos_ + 1));
      }
    }
    ++pos_;
    // Python: (3) is the integer 3, not a tuple.
    if (dims.size() == 1 && !trailing_comma) bad("shape must be a tuple ('(3)' is not one)");
    return dims;
  }

  const std::string& s_;
  std::string where_;
  size_t pos_ = 0;
};

// A member's .npy: its header read and checked against the member's size.
struct Npy {
  Header header;
  NpyType type;
  std::vector<int64_t> shape;  // C order, as returned
  uint64_t header_size = 0;
  uint64_t nbytes = 0;
};

std::string member_where(const std::string& path, const std::string& member) {
  return path + ": member '" + member + "': ";
}

Npy read_npy_header(zip::MemberReader& in, const std::string& where, uint64_t member_size) {
  constexpr size_t kPrefix = kMagicLen + 2;
  BV_CHECK(member_size >= kPrefix + 2, where, "only ", member_size,
           " bytes, too short for an npy header");
  char prefix[kPrefix];
  in.read(prefix, kPrefix);
  BV_CHECK(std::memcmp(prefix, kMagic, kMagicLen) == 0, where,
           "not an npy array (no \\x93NUMPY magic)");
  int major = static_cast<unsigned char>(prefix[6]), minor = static_cast<unsigned char>(prefix[7]);
  BV_CHECK((major == 1 || major == 2 || major == 3) && minor == 0, where, "npy format version ",
           major, ".", minor, " is not supported (1.0, 2.0 or 3.0)");
  size_t len_bytes = major == 1 ? 2 : 4;
  BV_CHECK(member_size >= kPrefix + len_bytes, where, "only ", member_size,
           " bytes, too short for an npy header");
  unsigned char len_buf[4] = {0, 0, 0, 0};
  in.read(len_buf, len_bytes);
  uint64_t header_len = len_buf[0] | (len_buf[1] << 8) | (uint64_t{len_buf[2]} << 16) |
                        (uint64_t{len_buf[3]} << 24);
  BV_CHECK(header_len <= kMaxHeaderLen, where, "npy header of ", header_len,
           " bytes is longer than numpy's limit of ", kMaxHeaderLen);
  Npy npy;
  npy.header_size = kPrefix + len_bytes + header_len;
  BV_CHECK(npy.header_size <= member_size, where, "npy header (", npy.header_size,
           " bytes) is longer than the member (", member_size, " bytes)");
  std::string text(header_len, '\0');
  in.read(text.data(), header_len);
  npy.header = HeaderParser(text, where).parse();
  npy.type = parse_descr(where, npy.header.descr);

  uint64_t numel = 1;
  for (int64_t d : npy.header.shape) {
    BV_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel) &&
                 numel <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
             where, "shape ", shape_text(npy.header.shape), " has too many elements");
  }
  uint64_t want = 0;
  bool overflow = __builtin_mul_overflow(numel, uint64_t{npy.type.itemsize}, &want);
  npy.nbytes = member_size - npy.header_size;
  BV_CHECK(!overflow && want == npy.nbytes, where, "data size ", npy.nbytes,
           " does not match shape ", shape_text(npy.header.shape), " ", npy.type.name, " (",
           overflow ? std::string("overflow") : std::to_string(want), " bytes)");
  npy.shape = npy.header.shape;
  return npy;
}

void byteswap(at::Tensor& t, size_t unit) {
  auto* p = static_cast<unsigned char*>(t.data_ptr());
  size_t n = t.nbytes();
  for (size_t i = 0; i + unit <= n; i += unit) std::reverse(p + i, p + i + unit);
}

// Reads the array data that follows the header, then lets the reader check size and CRC.
at::Tensor read_npy_data(zip::MemberReader& in, const Npy& npy, const std::string& where) {
  std::vector<int64_t> file_shape = npy.shape;
  // Fortran order: the bytes are the transpose's C order.
  if (npy.header.fortran_order) std::reverse(file_shape.begin(), file_shape.end());
  at::Tensor t = at::empty(file_shape, at::TensorOptions().dtype(npy.type.raw));
  BV_CHECK(t.nbytes() == npy.nbytes, where, "internal: tensor of ", t.nbytes(), " bytes for ",
           npy.nbytes, " bytes of data");
  if (npy.nbytes > 0) in.read(t.data_ptr(), npy.nbytes);
  in.finish();
  if (npy.type.swap) byteswap(t, npy.type.itemsize);
  if (npy.type.raw == at::kBool) {
    // numpy bools are bytes; anything but 0/1 would be undefined in a torch bool tensor.
    at::Tensor b = t.view(at::kByte);
    if (b.gt(1).any().item<bool>()) t = b.ne(0);
  }
  std::string file_type = npy.type.name;
  if (file_type == "uint16") t = t.to(at::kInt).bitwise_and(0xFFFF);
  if (file_type == "uint32") t = t.to(at::kLong).bitwise_and(int64_t{0xFFFFFFFF});
  if (file_type == "uint64")
    BV_CHECK(!t.lt(0).any().item<bool>(), where,
             "uint64 values above 2^63-1 cannot be loaded as int64");
  if (npy.header.fortran_order && t.dim() > 1) {
    std::vector<int64_t> perm(t.dim());
    for (int64_t i = 0; i < t.dim(); ++i) perm[i] = t.dim() - 1 - i;
    t = t.permute(perm).contiguous();
  }
  return t;
}

std::string array_name(const std::string& path, const std::string& member) {
  constexpr size_t kSuffix = 4;  // ".npy"
  BV_CHECK(member.size() > kSuffix && member.compare(member.size() - kSuffix, kSuffix, ".npy") == 0,
           path, ": member '", member, "' is not a .npy array (an npz holds NAME.npy members)");
  return member.substr(0, member.size() - kSuffix);
}

NpzEntry make_entry(const zip::Member& m, const std::string& name, const Npy& npy) {
  NpzEntry e;
  e.name = name;
  e.shape = npy.shape;
  e.dtype = npy.type.type;
  e.data_offset = m.data_offset;
  e.stored_size = m.stored_size;
  e.size = m.size;
  e.deflated = m.method == zip::kDeflated;
  e.fortran_order = npy.header.fortran_order;
  e.descr = npy.header.descr;
  e.header_size = npy.header_size;
  e.nbytes = npy.nbytes;
  e.crc32 = m.crc32;
  e.zip_flags = m.flags;
  e.header_offset = m.header_offset;
  return e;
}

}  // namespace

std::vector<NpzEntry> npz_index(const std::string& path) {
  zip::File file(path);
  std::vector<NpzEntry> out;
  for (const zip::Member& m : zip::read_directory(file)) {
    std::string name = array_name(path, m.name);
    zip::MemberReader in(file, m);
    Npy npy = read_npy_header(in, member_where(path, m.name), m.size);
    out.push_back(make_entry(m, name, npy));
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> load_npz(
    const std::string& path, const std::function<bool(const std::string&)>& want) {
  zip::File file(path);
  std::vector<zip::Member> members = zip::read_directory(file);
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const zip::Member& m : members) {
    std::string name = array_name(path, m.name);
    if (want && !want(name)) continue;
    std::string where = member_where(path, m.name);
    zip::MemberReader in(file, m);
    Npy npy = read_npy_header(in, where, m.size);
    out.emplace_back(name, read_npy_data(in, npy, where));
  }
  return out;
}

at::Tensor load_npz_entry(const std::string& path, const NpzEntry& e) {
  zip::File file(path);
  zip::Member m;
  m.name = e.name + ".npy";
  m.method = e.deflated ? zip::kDeflated : zip::kStored;
  m.flags = e.zip_flags;
  m.crc32 = e.crc32;
  m.stored_size = e.stored_size;
  m.size = e.size;
  m.header_offset = e.header_offset;
  m.data_offset = e.data_offset;
  std::string where = member_where(path, m.name);
  // The entry came from npz_index, but the file may have changed since: re-check what reading
  // relies on; the CRC check at the end catches changed content.
  BV_CHECK(e.data_offset <= file.size() && e.stored_size <= file.size() - e.data_offset, where,
           "its data (", e.stored_size, " bytes at offset ", e.data_offset,
           ") is past the end of the file (", file.size(), " bytes): changed since indexed?");
  BV_CHECK(e.deflated ? e.size / 1032 <= e.stored_size : e.size == e.stored_size, where,
           "entry sizes are inconsistent (", e.stored_size, " stored, ", e.size, " bytes)");
  zip::MemberReader in(file, m);
  Npy npy = read_npy_header(in, where, m.size);
  BV_CHECK(npy.header.descr == e.descr && npy.shape == e.shape &&
               npy.header.fortran_order == e.fortran_order && npy.header_size == e.header_size,
           where, "header no longer matches the index (", e.descr, " ", shape_text(e.shape), " vs ",
           npy.header.descr, " ", shape_text(npy.shape), "): changed since indexed?");
  return read_npy_data(in, npy, where);
}

std::string npy_header(c10::ScalarType dtype, const std::vector<int64_t>& shape) {
  const char* descr = descr_for(dtype);
  BV_CHECK(descr, "npz: dtype ", dtype_name(dtype), " cannot be saved (float16/32/64, bfloat16, ",
           "bool, int8/16/32/64 and uint8 can)");
  // The dict as numpy 1.24 writes it: sorted keys, Python reprs, trailing ", ".
  std::string shape_repr = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    shape_repr += (i ? ", " : "") + std::to_string(shape[i]);
  shape_repr += shape.size() == 1 ? ",)" : ")";
  std::string dict = std::string("{'descr': '") + descr +
                     "', 'fortran_order': False, 'shape': " + shape_repr + ", }";
  // Room to grow the first axis in place (format.GROWTH_AXIS_MAX_DIGITS = 21).
  if (!shape.empty()) dict.append(21 - std::to_string(shape[0]).size(), ' ');
  // Padded with spaces and a newline so the data starts at a multiple of 64; version 1.0 (2-byte
  // length) unless that cannot hold it. Like numpy, an exact multiple still gets 64 pad bytes.
  size_t hlen = dict.size() + 1;
  size_t len_bytes = 2;
  size_t pad = 64 - (kMagicLen + 2 + len_bytes + hlen) % 64;
  if (hlen + pad > 0xFFFF) {
    len_bytes = 4;
    pad = 64 - (kMagicLen + 2 + len_bytes + hlen) % 64;
  }
  size_t total_len = hlen + pad;
  std::string out(kMagic, kMagicLen);
  out.push_back(static_cast<char>(len_bytes == 2 ? 1 : 2));
  out.push_back(0);
  for (size_t i = 0; i < len_bytes; ++i)
    out.push_back(static_cast<char>((total_len >> (8 * i)) & 0xFF));
  out += dict;
  out.append(pad, ' ');
  out.push_back('\n');
  return out;
}

void save_npz(const std::string& path,
              const std::vector<std::pair<std::string, at::Tensor>>& params) {
  std::set<std::string> names;
  for (const auto& [name, t] : params) {
    BV_CHECK(!name.empty() && name.find('\0') == std::string::npos, "save_npz '", path,
             "': bad array name '", name, "'");
    BV_CHECK(names.insert(name).second, "save_npz '", path, "': array '", name, "' given twice");
    BV_CHECK(t.defined(), "save_npz '", path, "': array '", name, "' is an undefined tensor");
    BV_CHECK(t.layout() == at::kStrided, "save_npz '", path, "': array '", name,
             "' is not a dense tensor");
    BV_CHECK(descr_for(t.scalar_type()), "save_npz '", path, "': array '", name, "' has dtype ",
             dtype_name(t.scalar_type()), ", which npz cannot hold (float16/32/64, bfloat16, ",
             "bool, int8/16/32/64, uint8)");
  }
  zip::Writer writer(path);
  for (const auto& [name, tensor] : params) {
    // One tensor at a time is brought to contiguous CPU memory (no copy when it already is).
    at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
    std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
    std::string header = npy_header(t.scalar_type(), shape);
    writer.add_stored(name + ".npy", {{header.data(), header.size()},
                                      {t.numel() ? t.data_ptr() : nullptr, t.nbytes()}});
  }
  writer.commit();
}

}  // namespace bv::ckpt
