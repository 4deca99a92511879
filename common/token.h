// Bearer tokens as the binaries take them: from a file (a token on the
// command line shows in the process list), and made fresh for an embedded
// server.
#pragma once

#include <string>

#include "common/status.h"

namespace hpo {

// The first line of `path`, without surrounding white space.
// InvalidArgument naming the file when it cannot be read or holds no token.
Result<std::string> ReadTokenFile(const std::string& path);

// 32 bytes from the kernel's random source, as 64 hex digits.
// Unavailable when /dev/urandom cannot be read.
Result<std::string> RandomToken();

}  // namespace hpo
