// IDX files (the MNIST family's format), gzip-compressed, read into memory.
// No LibTorch: the trainer turns the bytes into tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace hpo::worker {

struct IdxArray {
  std::vector<int64_t> dims;  // e.g. {60000, 28, 28}
  std::vector<uint8_t> data;  // row-major, product(dims) bytes
};

// Decompresses a .gz file (zlib) into memory. NotFound / DataLoss name it.
Result<std::string> ReadGzipFile(const std::string& path);
// Parses unsigned-byte IDX data (magic 0x00000803 for images, 0x00000801
// for labels). DataLoss with the reason for anything malformed.
Result<IdxArray> ParseIdx(const std::string& bytes, const std::string& name);

}  // namespace hpo::worker
