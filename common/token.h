// Bearer tokens as the binaries take them: from a file (a token on the
// command line shows in the process list), and made fresh for an embedded
// server.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace hpo {

// The first line of `path`, without surrounding white space.
// InvalidArgument naming the file when it cannot be read or holds no token.
Result<std::string> ReadTokenFile(const std::string& path);

// 32 bytes from the kernel's random source, as 64 hex digits.
// Unavailable when /dev/urandom cannot be read.
Result<std::string> RandomToken();

// Compares without stopping at the first differing byte, so the time taken
// does not tell a caller how much of a guessed token was right: the loop
// runs over the expected length whatever was given.
bool TokenEquals(std::string_view given, std::string_view expected);

// The credentials of an "Authorization: Bearer <token>" value, the scheme
// in any case (RFC 7235 section 2.1); nullopt for another scheme or none.
std::optional<std::string_view> BearerToken(std::string_view authorization);

}  // namespace hpo
