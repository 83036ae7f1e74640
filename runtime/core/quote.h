// How error messages quote what a user handed bvlua (a JSON-L line, a pp string, an override's
// value, a literal, a file name): at most a few hundred bytes of it, control bytes escaped, so a
// 100 MB line makes a short message and a file name with a NUL or an escape sequence shows it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace bv {

// The most bytes snippet() copies from its input.
inline constexpr size_t kSnippetBytes = 200;

// `text` as a message quotes it: control bytes (and DEL) written as \n, \r, \t, \0 or \xNN, and,
// when longer than max_bytes, its first max_bytes bytes (not cutting a UTF-8 character) followed
// by "... (N bytes in all)". The caller adds the quotes.
std::string snippet(std::string_view text, size_t max_bytes = kSnippetBytes);

}  // namespace bv
