#include "common/token.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>

namespace hpo {

Result<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::InvalidArgument("token file '" + path + "': " + std::strerror(errno));
  std::string line;
  std::getline(in, line);
  const auto b = line.find_first_not_of(" \t\r");
  if (b == std::string::npos)
    return Status::InvalidArgument("token file '" + path + "' holds no token");
  const auto e = line.find_last_not_of(" \t\r");
  return line.substr(b, e - b + 1);
}

Result<std::string> RandomToken() {
  std::ifstream in("/dev/urandom", std::ios::binary);
  unsigned char bytes[32];
  if (!in.read(reinterpret_cast<char*>(bytes), sizeof bytes)) {
    return Status::Unavailable("cannot read /dev/urandom for a token");
  }
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

bool TokenEquals(std::string_view given, std::string_view expected) {
  volatile unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff = diff | (g ^ static_cast<unsigned char>(expected[i]));
  }
  return diff == 0;
}

std::optional<std::string_view> BearerToken(std::string_view authorization) {
  const auto space = authorization.find(' ');
  if (space != 6) return std::nullopt;
  static constexpr std::string_view kScheme = "bearer";
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i])
      return std::nullopt;
  }
  const auto start = authorization.find_first_not_of(' ', space);
  if (start == std::string_view::npos) return std::nullopt;
  return authorization.substr(start);
}

}  // namespace hpo
