// SHA-256 as the project uses it: checkpoints carry one (artifact store,
// worker uploads and downloads) and worker sessions are kept as one. Hex
// digests are lower case.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace hpo {

// An incremental digest. Not thread-safe; one per stream of bytes.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(std::string_view bytes);
  // The digest of everything given so far, as 64 hex digits. Ends the
  // stream: call Update no more afterwards.
  std::string HexDigest();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The digest of `bytes`, as 64 hex digits.
std::string Sha256Hex(std::string_view bytes);

// Whether `s` is 64 lower- or upper-case hex digits.
bool IsSha256Hex(std::string_view s);

}  // namespace hpo
