#include "server/store/artifact_store.h"

#include <cctype>
#include <filesystem>

#include "server/store/store_url.h"

namespace hpo::store {

Status CheckpointOverLimit(Id trial_id, int64_t size, const ArtifactStoreOptions& options) {
  const int64_t limit = options.max_checkpoint_bytes;
  std::string flag = std::to_string(limit >> 20) + " MiB";
  if (limit % (int64_t{1} << 20) != 0) flag = std::to_string(limit) + " bytes";
  return Status::ResourceExhausted("checkpoint of trial " + std::to_string(trial_id) + ": " +
                                   std::to_string(size) + " bytes, over the server's limit of " +
                                   flag + " (--max-checkpoint-mb)");
}

Status UploadDeleted(Id trial_id) {
  return Status::FailedPrecondition(
      "checkpoint of trial " + std::to_string(trial_id) +
      ": the upload was deleted before it was committed (the trial ended)");
}

Result<std::string> VerifyUpload(Id trial_id, int64_t announced, int64_t received, Sha256& sha,
                                 std::string_view sha256) {
  if (received != announced) {
    return Status::DataLoss("checkpoint of trial " + std::to_string(trial_id) +
                            " is short: " + std::to_string(received) + " of the " +
                            std::to_string(announced) + " bytes announced");
  }
  std::string got = sha.HexDigest();
  std::string want(sha256);
  for (char& c : want) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (got != want) {
    return Status::DataLoss("checkpoint of trial " + std::to_string(trial_id) +
                            ": the bytes' SHA-256 is " + got + ", not the " + want + " announced");
  }
  return got;
}

Result<std::unique_ptr<ArtifactStore>> OpenArtifactStore(const std::string& spec,
                                                         const std::string& store_url,
                                                         ArtifactStoreOptions options) {
  if (spec.rfind("files:", 0) == 0) return OpenFileArtifactStore(spec.substr(6), options);
  if (spec == "postgresql") return OpenPostgresArtifactStore(store_url, options);
  if (!spec.empty()) {
    return Status::InvalidArgument("--artifacts '" + spec + "': expected files:DIR or postgresql");
  }
  HPO_ASSIGN_OR_RETURN(StoreUrl parsed, ParseStoreUrl(store_url));
  if (parsed.backend == StoreUrl::Backend::kPostgresql)
    return OpenPostgresArtifactStore(store_url, options);
  if (parsed.target == ":memory:") {
    return Status::InvalidArgument(
        "--artifacts: an in-memory SQLite store has no directory to keep checkpoints "
        "next to; give --artifacts files:DIR");
  }
  // Next to the database file, so that a data directory holds everything.
  std::filesystem::path dir = std::filesystem::path(parsed.target).parent_path();
  if (dir.empty()) dir = ".";
  return OpenFileArtifactStore((dir / "checkpoints").string(), options);
}

}  // namespace hpo::store
