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
//    if good. Stat reads only what the checkpoint says of itself (step,
//    size, checksum) and does not read the data.
//  * Delete removes a trial's checkpoint (and any abandoned upload); it is
//    called when the trial ends. An upload still in flight then may commit
//    afterwards: List names such leftovers, so a sweep can delete them.
//  * Thread-safe, and shared by every replica that opens the same location
//    (a directory they all mount, or their PostgreSQL).
//
// Two backends (OpenArtifactStore below):
//  * files:DIR - one file per trial, DIR/trial-<id>.ckpt: a fixed-size text
//    header (step, size, SHA-256) then the bytes. An upload is written to a
//    temporary file in DIR, fsynced and renamed over the trial's (then DIR
//    is fsynced), so a crash at any point leaves the old file or the new
//    one, each whole. A shared directory (NFS, a ReadWriteMany volume)
//    serves a fleet of replicas.
//  * postgresql - the store's own database: chunked bytea rows
//    (sql/postgresql/0004_checkpoints.sql); the new version becomes the
//    trial's in the transaction that drops the old one.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/sha256.h"
#include "common/status.h"
#include "server/store/store.h"

namespace hpo::store {

struct CheckpointInfo {
  int64_t step = 0;  // taken after this step
  int64_t size_bytes = 0;
  std::string sha256;  // hex, lower case
};

class CheckpointWriter {
 public:
  // Without a successful Commit: abandons the upload (the previous
  // checkpoint stays, and what was written is removed, best effort).
  virtual ~CheckpointWriter() = default;
  // InvalidArgument: more bytes than Begin announced.
  virtual Status Append(std::string_view bytes) = 0;
  // Verifies the size and `sha256` (hex) against what was appended, then
  // makes this the trial's checkpoint, replacing the previous one.
  // DataLoss: short or not matching; nothing changes then.
  // FailedPrecondition (UploadDeleted): Delete removed the trial's uploads
  // meanwhile (the trial ended), which no retry changes; Append may answer
  // it too where the bytes are stored as they come.
  // REQUIRES: called at most once.
  virtual Status Commit(std::string_view sha256) = 0;
};

class CheckpointReader {
 public:
  virtual ~CheckpointReader() = default;
  virtual const CheckpointInfo& info() const = 0;
  // Up to `max_bytes` of the next bytes; empty at the end, once the whole
  // checkpoint was read and its checksum matched. DataLoss when it did not.
  // A reader keeps reading the version it opened even if it is replaced or
  // deleted meanwhile.
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
  virtual Result<std::unique_ptr<CheckpointWriter>> Begin(Id trial_id, int64_t step,
                                                          int64_t size_bytes) = 0;
  // The trial's checkpoint, if it has one. DataLoss: one is there but what
  // it says of itself is unreadable.
  virtual Result<std::optional<CheckpointInfo>> Stat(Id trial_id) = 0;
  // NotFound: none.
  virtual Result<std::unique_ptr<CheckpointReader>> Open(Id trial_id) = 0;
  // Nothing to delete is fine.
  virtual Status Delete(Id trial_id) = 0;
  // Every trial with a checkpoint or an unfinished upload, in id order.
  virtual Result<std::vector<Id>> List() = 0;
};

struct ArtifactStoreOptions {
  // Begin refuses checkpoints larger than this (hpo-server
  // --max-checkpoint-mb).
  int64_t max_checkpoint_bytes = int64_t{1024} << 20;
};

// The store named by `spec`, next to the trial store opened from
// `store_url`:
//   ""            the default: files:<directory of the SQLite file>/checkpoints
//                 for a SQLite store, postgresql for a PostgreSQL one (every
//                 replica of a fleet sees it);
//   files:DIR     files under DIR (created if missing);
//   postgresql    chunked rows in the PostgreSQL store's own database.
// InvalidArgument names what is wrong (an in-memory SQLite store has no
// directory; postgresql needs a PostgreSQL store); Unavailable when the
// location cannot be reached or created.
Result<std::unique_ptr<ArtifactStore>> OpenArtifactStore(const std::string& spec,
                                                         const std::string& store_url,
                                                         ArtifactStoreOptions options = {});

// The backends, for the factory and the tests.
//
// What every backend's Begin answers for a checkpoint over the limit.
Status CheckpointOverLimit(Id trial_id, int64_t size, const ArtifactStoreOptions& options);
// What every backend answers for an upload that Delete removed meanwhile.
Status UploadDeleted(Id trial_id);
// What every backend's Commit checks first: all `announced` bytes came
// (`received` of them) and their digest, `sha` (ended here), is `sha256`
// (hex, either case). The digest (hex, lower case), or DataLoss naming what
// differs.
Result<std::string> VerifyUpload(Id trial_id, int64_t announced, int64_t received, Sha256& sha,
                                 std::string_view sha256);
Result<std::unique_ptr<ArtifactStore>> OpenFileArtifactStore(const std::string& dir,
                                                             ArtifactStoreOptions options);
// `url`: a postgresql:// URL of a database migrated by OpenStore.
Result<std::unique_ptr<ArtifactStore>> OpenPostgresArtifactStore(const std::string& url,
                                                                 ArtifactStoreOptions options);

}  // namespace hpo::store
