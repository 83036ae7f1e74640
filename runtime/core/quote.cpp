#include "core/quote.h"

#include <cstdio>

namespace bv {

namespace {

// How many of text's first `max_bytes` bytes to keep without cutting a UTF-8 character: a cut
// before a continuation byte (10xxxxxx) moves back to the start of its character (at most 3
// bytes: a character is at most 4; what is not UTF-8 is cut where it is).
size_t utf8_cut(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text.size();
  size_t cut = max_bytes;
  while (cut > 0 && max_bytes - cut < 3 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  return (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80 ? max_bytes : cut;
}

void append_escaped(std::string& out, unsigned char c) {
  switch (c) {
    case '\n': out += "\\n"; return;
    case '\r': out += "\\r"; return;
    case '\t': out += "\\t"; return;
    case '\0': out += "\\0"; return;
    default: break;
  }
  if (c < 0x20 || c == 0x7F) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
    out += buf;
  } else {
    out += static_cast<char>(c);
  }
}

}  // namespace

std::string snippet(std::string_view text, size_t max_bytes) {
  size_t keep = utf8_cut(text, max_bytes);
  std::string out;
  out.reserve(keep + 32);
  for (size_t i = 0; i < keep; ++i) append_escaped(out, static_cast<unsigned char>(text[i]));
  if (keep < text.size()) out += "... (" + std::to_string(text.size()) + " bytes in all)";
  return out;
}

}  // namespace bv
