#include "worker/idx.h"

#include <zlib.h>

#include <filesystem>

namespace hpo::worker {

Result<std::string> ReadGzipFile(const std::string& path) {
  if (!std::filesystem::exists(path)) return Status::NotFound(path + ": no such file");
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return Status::Unavailable(path + ": cannot open");
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int err = 0;
      const std::string msg = gzerror(f, &err);
      gzclose(f);
      return Status::DataLoss(path + ": " + msg);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  gzclose(f);
  return out;
}

Result<IdxArray> ParseIdx(const std::string& bytes, const std::string& name) {
  auto u32 = [&](size_t at) {
    return (uint32_t(uint8_t(bytes[at])) << 24) | (uint32_t(uint8_t(bytes[at + 1])) << 16) |
           (uint32_t(uint8_t(bytes[at + 2])) << 8) | uint32_t(uint8_t(bytes[at + 3]));
  };
  if (bytes.size() < 4) return Status::DataLoss(name + ": too short for an IDX header");
  const uint32_t magic = u32(0);
  if ((magic >> 8) != 0x08) {
    return Status::DataLoss(name + ": not unsigned-byte IDX data (magic " + std::to_string(magic) +
                            ")");
  }
  const int ndims = static_cast<int>(magic & 0xff);
  if (ndims < 1 || ndims > 4)
    return Status::DataLoss(name + ": " + std::to_string(ndims) + " dimensions");
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  if (bytes.size() < header) return Status::DataLoss(name + ": truncated header");
  IdxArray out;
  size_t total = 1;
  for (int i = 0; i < ndims; ++i) {
    out.dims.push_back(u32(4 + 4 * i));
    total *= static_cast<size_t>(out.dims.back());
  }
  if (bytes.size() != header + total) {
    return Status::DataLoss(name + ": expected " + std::to_string(header + total) +
                            " bytes, found " + std::to_string(bytes.size()));
  }
  out.data.assign(bytes.begin() + header, bytes.end());
  return out;
}

}  // namespace hpo::worker
