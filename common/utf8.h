// UTF-8 as JSON and protobuf strings require it: the spec parser refuses
// text that is not, the worker's command runner repairs a program's output.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace hpo {

// The length (1 to 4) of the well-formed UTF-8 character that starts at
// s[i], or 0 when none does there: a stray continuation byte, a truncated
// sequence, an overlong form, a surrogate or a code point beyond U+10FFFF.
// REQUIRES: i < s.size().
size_t Utf8CharLength(std::string_view s, size_t i);

bool IsValidUtf8(std::string_view s);

// `s` with every byte that is not part of a well-formed character replaced
// by U+FFFD.
std::string ValidUtf8(std::string_view s);

}  // namespace hpo
