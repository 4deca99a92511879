// The worker's id file (hpo-worker --id-file): who this worker is across
// its restarts. Two lines:
//   1. its instance, the name that tells it apart from the other workers on
//      its host (a random id, made when the file is created);
//   2. its identity secret, which the server issued at the instance's first
//      registration and which registering that instance again must present
//      (worker.proto RegisterRequest.identity_secret). Absent until the
//      first registration, and in files written before secrets existed.
// The secret lets its holder register as this worker: the file is written
// with mode 0600, and kept out of images and logs.
#pragma once

#include <string>

#include "common/status.h"

namespace hpo::worker {

struct WorkerIdFile {
  std::string instance;
  std::string identity_secret;  // empty: none yet
};

// The file at `path`. One that does not exist is created (mode 0600) with a
// new random instance and no secret. InvalidArgument, naming the file and
// the line, when it cannot be read or written, its first line is empty, or
// its second line is not a secret as the server issues them (64 hex digits).
Result<WorkerIdFile> ReadOrCreateIdFile(const std::string& path);

// Replaces the file at `path` with `file`: written to a temporary file beside
// it (mode 0600), flushed to disk, then renamed over it, so a crash leaves
// the old file or the new one, whole. InvalidArgument naming the file when
// it cannot be written.
Status WriteIdFile(const std::string& path, const WorkerIdFile& file);

}  // namespace hpo::worker
