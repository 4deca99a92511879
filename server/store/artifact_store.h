// The artifact store: trials' checkpoints, so that a paused trial can be
// promoted and resumed on any worker (DESIGN.md: "a worker never holds
// state the server needs").
//
// One checkpoint per trial at a time: the newest complete one. Rules every
// backend keeps (tests/artifact_store_test.cc checks them on each):
//  * Atomic replacement. A new checkpoint becomes the trial's only when
//    Commit() verified all of it (the size announced at Begin and the
//    SHA-256 given at Commit); until then, and forever if the writer is
//    abandoned or its process dies mid-upload, the previous checkpoint
//    stays the trial's, readable and intact.
//  * Bounded. Begin refuses a size over the store's limit
//    (ResourceExhausted, naming the limit), and a writer refuses bytes
//    beyond the size it announced.
//  * Verified on read. Open's reader checks the size and the checksum as it
//    reads; a checkpoint that fails either is DataLoss, never handed out as
//    if good.
//  * Delete removes a trial's checkpoint (and any abandoned upload); it is
//    called when the trial ends.
//  * Thread-safe, and shared by every replica that opens the same location
//    (a directory they all mount, or their PostgreSQL).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "server/store/store.h"

namespace hpo::store {

struct CheckpointInfo {
  int64_t step = 0;       // taken after this step
  int64_t size_bytes = 0;
  std::string sha256;     // hex, lower case
};

class CheckpointWriter {
 public:
  virtual ~CheckpointWriter() = default;
  // InvalidArgument: more bytes than Begin announced.
  virtual Status Append(std::string_view bytes) = 0;
  // Verifies the size and `sha256` (hex) against what was appended, then
  // makes this the trial's checkpoint, replacing the previous one.
  // DataLoss: short or not matching; nothing changes then.
  virtual Status Commit(std::string_view sha256) = 0;
};

class CheckpointReader {
 public:
  virtual ~CheckpointReader() = default;
  virtual const CheckpointInfo& info() const = 0;
  // Up to `max_bytes` of the next bytes; empty at the end, once the whole
  // checkpoint was read and its checksum matched. DataLoss when it did not.
  virtual Result<std::string> Read(size_t max_bytes) = 0;
};

class ArtifactStore {
 public:
  virtual ~ArtifactStore() = default;
  // "files:/var/lib/hpo/checkpoints" or "postgresql", for logs.
  virtual std::string description() const = 0;
  virtual int64_t max_checkpoint_bytes() const = 0;

  // Starts a new checkpoint of `trial_id`. ResourceExhausted: size over the
  // limit. InvalidArgument: a negative step or size.
  virtual Result<std::unique_ptr<CheckpointWriter>> Begin(Id trial_id, int64_t step, int64_t size_bytes) = 0;
  // The trial's checkpoint, if it has one.
  virtual Result<std::optional<CheckpointInfo>> Stat(Id trial_id) = 0;
  // NotFound: none.
  virtual Result<std::unique_ptr<CheckpointReader>> Open(Id trial_id) = 0;
  // Nothing to delete is fine.
  virtual Status Delete(Id trial_id) = 0;
};

}  // namespace hpo::store
