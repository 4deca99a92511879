#include "common/token.h"

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
  if (b == std::string::npos) return Status::InvalidArgument("token file '" + path + "' holds no token");
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

}  // namespace hpo
