// The PostgreSQL backend of the artifact store (see artifact_store.h), on
// the tables of sql/postgresql/0004_checkpoints.sql:
//   checkpoint_uploads  one row per upload; the committed one (at most one
//                       per trial, a unique partial index) is the trial's
//                       checkpoint
//   checkpoint_chunks   its bytes, kChunkBytes per row, in seq order
// Chunks are inserted as they arrive, each in a statement of its own, so an
// upload never holds a transaction open while a worker sends. Commit deletes
// the trial's previous checkpoint and marks the new one committed in one
// transaction. A reader reads in one REPEATABLE READ transaction, so a
// checkpoint replaced or deleted meanwhile still reads whole.
#include <algorithm>
#include <chrono>
#include <pqxx/pqxx>
#include <vector>

#include "common/mutex.h"
#include "common/sha256.h"
#include "common/thread_annotations.h"
#include "server/store/artifact_store.h"
#include "server/store/store_url.h"

namespace hpo::store {
namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;
// pg_advisory_xact_lock's first key for "one commit per trial at a time"
// (the second is the trial id); the store's migrations use another.
constexpr int kCommitLockKey = 7246032;

std::string OneLine(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  for (char& c : s) {
    if (c == '\n' || c == '\t') c = ' ';
  }
  return s;
}

int64_t NowMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

// Runs f, turning libpqxx's exceptions into a Status; `broken` is set when
// the connection should not be used again.
template <typename F>
Status Guard(const std::string& display, bool& broken, F&& f) {
  try {
    f();
    return Status::OK();
  } catch (const pqxx::broken_connection& e) {
    broken = true;
    return Status::Unavailable(display + ": connection lost: " + OneLine(e.what()));
  } catch (const pqxx::in_doubt_error& e) {
    broken = true;
    return Status::Unavailable(display + ": commit outcome unknown: " + OneLine(e.what()));
  } catch (const pqxx::sql_error& e) {
    const std::string& state = e.sqlstate();
    if (state.rfind("57", 0) == 0 || state.rfind("08", 0) == 0) {
      broken = true;
      return Status::Unavailable(display + ": " + OneLine(e.what()));
    }
    if (state == "42P01") {
      return Status::FailedPrecondition(display +
                                        ": the checkpoint tables are missing (open the store with "
                                        "hpo-server once to migrate it): " +
                                        OneLine(e.what()));
    }
    return Status::Internal(display + ": " + OneLine(e.what()));
  } catch (const pqxx::failure& e) {
    broken = true;
    return Status::Unavailable(display + ": " + OneLine(e.what()));
  } catch (const std::exception& e) {
    return Status::Internal(display + ": " + OneLine(e.what()));
  }
}

class PostgresArtifactStore;

// A connection borrowed from the store's pool; returned when destroyed
// unless it broke.
class Lease {
 public:
  Lease(PostgresArtifactStore& store, std::unique_ptr<pqxx::connection> c)
      : store_(&store), c_(std::move(c)) {}
  Lease(Lease&&) = default;
  Lease& operator=(Lease&&) = default;
  ~Lease();
  pqxx::connection& operator*() { return *c_; }
  bool broken = false;

 private:
  PostgresArtifactStore* store_;
  std::unique_ptr<pqxx::connection> c_;
};

class PostgresArtifactStore final : public ArtifactStore {
 public:
  PostgresArtifactStore(std::string url, std::string display, ArtifactStoreOptions options)
      : url_(std::move(url)), display_(std::move(display)), options_(options) {}

  std::string description() const override { return "postgresql (" + display_ + ")"; }
  int64_t max_checkpoint_bytes() const override { return options_.max_checkpoint_bytes; }
  const std::string& display() const { return display_; }

  Result<Lease> Connect() {
    {
      MutexLock lock(mu_);
      if (!idle_.empty()) {
        auto c = std::move(idle_.back());
        idle_.pop_back();
        return Lease(*this, std::move(c));
      }
    }
    std::unique_ptr<pqxx::connection> c;
    bool broken = false;
    HPO_RETURN_IF_ERROR(
        Guard(display_, broken, [&] { c = std::make_unique<pqxx::connection>(url_); }));
    return Lease(*this, std::move(c));
  }
  void GiveBack(std::unique_ptr<pqxx::connection> c) {
    if (!c || !c->is_open()) return;
    MutexLock lock(mu_);
    if (idle_.size() < kMaxIdle) idle_.push_back(std::move(c));
  }

  Result<std::unique_ptr<CheckpointWriter>> Begin(Id trial_id, int64_t step,
                                                  int64_t size_bytes) override;

  Result<std::optional<CheckpointInfo>> Stat(Id trial_id) override {
    HPO_ASSIGN_OR_RETURN(Lease c, Connect());
    std::optional<CheckpointInfo> info;
    HPO_RETURN_IF_ERROR(Guard(display_, c.broken, [&] {
      pqxx::nontransaction n(*c);
      const pqxx::result r = n.exec_params(
          "SELECT step, size_bytes, sha256 FROM checkpoint_uploads WHERE trial_id = $1 AND "
          "committed_ms IS NOT NULL",
          trial_id);
      if (!r.empty())
        info =
            CheckpointInfo{r[0][0].as<int64_t>(), r[0][1].as<int64_t>(), r[0][2].as<std::string>()};
    }));
    return info;
  }

  Result<std::unique_ptr<CheckpointReader>> Open(Id trial_id) override;

  Status Delete(Id trial_id) override {
    HPO_ASSIGN_OR_RETURN(Lease c, Connect());
    // The chunks go with their uploads (ON DELETE CASCADE).
    return Guard(display_, c.broken, [&] {
      pqxx::nontransaction n(*c);
      n.exec_params("DELETE FROM checkpoint_uploads WHERE trial_id = $1", trial_id);
    });
  }

  Result<std::vector<Id>> List() override {
    HPO_ASSIGN_OR_RETURN(Lease c, Connect());
    std::vector<Id> ids;
    HPO_RETURN_IF_ERROR(Guard(display_, c.broken, [&] {
      pqxx::nontransaction n(*c);
      for (const auto& row :
           n.exec("SELECT DISTINCT trial_id FROM checkpoint_uploads ORDER BY trial_id")) {
        ids.push_back(row[0].as<int64_t>());
      }
    }));
    return ids;
  }

 private:
  // Connections kept for the next upload or download. An upload holds one
  // while its chunks arrive, so a fleet pausing at a rung holds many at
  // once; with 4 kept, bench/load (200 workers, promotion ASHA) opened about
  // 60 new connections a second, each a PostgreSQL backend started and
  // stopped, and its RPC p99 fell from 587 to 207 ms with 32 (40-second
  // runs; bench/README.md, "load").
  static constexpr size_t kMaxIdle = 32;
  const std::string url_, display_;
  const ArtifactStoreOptions options_;
  Mutex mu_;
  std::vector<std::unique_ptr<pqxx::connection>> idle_ HPO_GUARDED_BY(mu_);
};

Lease::~Lease() {
  if (store_ && c_ && !broken) store_->GiveBack(std::move(c_));
}

class PostgresWriter final : public CheckpointWriter {
 public:
  PostgresWriter(PostgresArtifactStore& store, Lease c, int64_t upload_id, Id trial_id,
                 int64_t size)
      : store_(store), c_(std::move(c)), upload_id_(upload_id), trial_id_(trial_id), size_(size) {}
  ~PostgresWriter() override {
    if (committed_) return;
    // Best effort: a failure leaves rows Delete removes when the trial ends.
    (void)Guard(store_.display(), c_.broken, [&] {
      pqxx::nontransaction n(*c_);
      n.exec_params("DELETE FROM checkpoint_uploads WHERE id = $1", upload_id_);
    });
  }

  Status Append(std::string_view bytes) override {
    if (committed_ || failed_)
      return Status::FailedPrecondition("this checkpoint upload has ended");
    if (static_cast<int64_t>(bytes.size()) > size_ - received_) {
      return Status::InvalidArgument("checkpoint of trial " + std::to_string(trial_id_) +
                                     ": more than the " + std::to_string(size_) +
                                     " bytes announced");
    }
    received_ += static_cast<int64_t>(bytes.size());
    sha_.Update(bytes);
    while (!bytes.empty()) {
      const size_t take = std::min(bytes.size(), kChunkBytes - pending_.size());
      pending_.append(bytes.substr(0, take));
      bytes.remove_prefix(take);
      if (pending_.size() == kChunkBytes) HPO_RETURN_IF_ERROR(Flush());
    }
    return Status::OK();
  }

  Status Commit(std::string_view sha256) override {
    if (committed_ || failed_)
      return Status::FailedPrecondition("this checkpoint upload has ended");
    failed_ = true;
    HPO_ASSIGN_OR_RETURN(const std::string got,
                         VerifyUpload(trial_id_, size_, received_, sha_, sha256));
    if (!pending_.empty()) HPO_RETURN_IF_ERROR(Flush());
    bool gone = false;
    HPO_RETURN_IF_ERROR(Guard(store_.display(), c_.broken, [&] {
      pqxx::work w(*c_);
      w.exec_params("SELECT pg_advisory_xact_lock($1, $2)", kCommitLockKey,
                    static_cast<int>(trial_id_));
      // Delete removed this upload meanwhile (the trial ended): it must not
      // come back. Delete takes no advisory lock, so the row is locked here:
      // a Delete that comes later waits for this commit (and then removes
      // what it made), and one that came first leaves no row to lock.
      if (w.exec_params("SELECT 1 FROM checkpoint_uploads WHERE id = $1 FOR UPDATE", upload_id_)
              .empty()) {
        gone = true;
        return;
      }
      w.exec_params(
          "DELETE FROM checkpoint_uploads WHERE trial_id = $1 AND committed_ms IS NOT NULL",
          trial_id_);
      const pqxx::result updated = w.exec_params(
          "UPDATE checkpoint_uploads SET sha256 = $2, committed_ms = $3 WHERE id = $1", upload_id_,
          got, NowMs());
      if (updated.affected_rows() != 1) {  // not committed: the DELETE above is rolled back too
        gone = true;
        return;
      }
      w.commit();
    }));
    if (gone) return UploadDeleted(trial_id_);
    committed_ = true;
    return Status::OK();
  }

 private:
  Status Flush() {
    const int seq = next_seq_++;
    bool gone = false;
    Status s = Guard(store_.display(), c_.broken, [&] {
      pqxx::nontransaction n(*c_);
      try {
        n.exec_params("INSERT INTO checkpoint_chunks (upload_id, seq, data) VALUES ($1, $2, $3)",
                      upload_id_, seq, pqxx::binarystring(pending_.data(), pending_.size()));
      } catch (const pqxx::foreign_key_violation&) {
        gone = true;  // Delete removed the upload's row meanwhile
      }
    });
    if (gone) s = UploadDeleted(trial_id_);
    if (!s.ok()) {
      failed_ = true;
      return s;
    }
    pending_.clear();
    return Status::OK();
  }

  PostgresArtifactStore& store_;
  Lease c_;
  const int64_t upload_id_;
  const Id trial_id_;
  const int64_t size_;
  int64_t received_ = 0;
  int next_seq_ = 0;
  std::string pending_;  // bytes not inserted yet, fewer than kChunkBytes
  Sha256 sha_;
  bool committed_ = false;
  bool failed_ = false;
};

class PostgresReader final : public CheckpointReader {
 public:
  PostgresReader(PostgresArtifactStore& store, Lease c, int64_t upload_id, CheckpointInfo info,
                 Id trial_id)
      : store_(store),
        c_(std::move(c)),
        upload_id_(upload_id),
        info_(std::move(info)),
        trial_id_(trial_id) {}
  ~PostgresReader() override {
    if (tx_) (void)Guard(store_.display(), c_.broken, [&] { tx_->abort(); });
    tx_.reset();
  }
  const CheckpointInfo& info() const override { return info_; }

  // Starts the snapshot; called once, before the first Read.
  Status Start() {
    return Guard(store_.display(), c_.broken, [&] {
      tx_ = std::make_unique<pqxx::transaction<pqxx::repeatable_read, pqxx::read_only>>(*c_);
      // The snapshot is taken at the first statement: check that the
      // upload Open found is still the one, in it.
      if (tx_->exec_params(
                 "SELECT 1 FROM checkpoint_uploads WHERE id = $1 AND committed_ms IS NOT NULL",
                 upload_id_)
              .empty()) {
        replaced_ = true;
      }
    });
  }
  bool replaced() const { return replaced_; }

  Result<std::string> Read(size_t max_bytes) override {
    max_bytes = std::max<size_t>(max_bytes, 1);
    if (offset_ == buffer_.size()) {
      buffer_.clear();
      offset_ = 0;
      if (read_ == info_.size_bytes) return Finish();
      HPO_ASSIGN_OR_RETURN(std::optional<std::string> chunk, Chunk(seq_));
      if (!chunk) {
        return Status::DataLoss("checkpoint of trial " + std::to_string(trial_id_) +
                                " is truncated: " + std::to_string(read_) + " of " +
                                std::to_string(info_.size_bytes) + " bytes");
      }
      ++seq_;
      if (chunk->empty() || read_ + static_cast<int64_t>(chunk->size()) > info_.size_bytes) {
        return Status::DataLoss("checkpoint of trial " + std::to_string(trial_id_) +
                                " has chunks of the wrong size (longer than its " +
                                std::to_string(info_.size_bytes) + " bytes, or empty)");
      }
      buffer_ = std::move(*chunk);
      read_ += static_cast<int64_t>(buffer_.size());
      sha_.Update(buffer_);
    }
    const size_t take = std::min(max_bytes, buffer_.size() - offset_);
    std::string out = buffer_.substr(offset_, take);
    offset_ += take;
    return out;
  }

 private:
  Result<std::optional<std::string>> Chunk(int seq) {
    std::optional<std::string> out;
    HPO_RETURN_IF_ERROR(Guard(store_.display(), c_.broken, [&] {
      const pqxx::result r = tx_->exec_params(
          "SELECT data FROM checkpoint_chunks WHERE upload_id = $1 AND seq = $2", upload_id_, seq);
      if (r.empty()) return;
      const pqxx::binarystring b(r[0][0]);
      out = b.str();
    }));
    return out;
  }

  Result<std::string> Finish() {
    if (!verified_) {
      HPO_ASSIGN_OR_RETURN(std::optional<std::string> extra, Chunk(seq_));
      if (extra) {
        return Status::DataLoss("checkpoint of trial " + std::to_string(trial_id_) +
                                " is longer than the size it was committed with");
      }
      const std::string got = sha_.HexDigest();
      if (got != info_.sha256) {
        return Status::DataLoss("checkpoint of trial " + std::to_string(trial_id_) +
                                " is corrupt: its SHA-256 is " + got + ", not " + info_.sha256);
      }
      verified_ = true;
    }
    return std::string();
  }

  PostgresArtifactStore& store_;
  Lease c_;
  std::unique_ptr<pqxx::dbtransaction> tx_;
  const int64_t upload_id_;
  const CheckpointInfo info_;
  const Id trial_id_;
  std::string buffer_;  // the current chunk
  size_t offset_ = 0;   // handed out of buffer_ so far
  int64_t read_ = 0;    // bytes of the chunks fetched so far
  int seq_ = 0;
  Sha256 sha_;
  bool verified_ = false;
  bool replaced_ = false;
};

Result<std::unique_ptr<CheckpointWriter>> PostgresArtifactStore::Begin(Id trial_id, int64_t step,
                                                                       int64_t size_bytes) {
  if (step < 0) return Status::InvalidArgument("step: must be >= 0");
  if (size_bytes < 0) return Status::InvalidArgument("total_bytes: must be >= 0");
  if (size_bytes > options_.max_checkpoint_bytes)
    return CheckpointOverLimit(trial_id, size_bytes, options_);
  HPO_ASSIGN_OR_RETURN(Lease c, Connect());
  int64_t id = 0;
  HPO_RETURN_IF_ERROR(Guard(display_, c.broken, [&] {
    pqxx::nontransaction n(*c);
    id = n.exec_params(
              "INSERT INTO checkpoint_uploads (trial_id, step, size_bytes, started_ms) VALUES ($1, "
              "$2, $3, $4) "
              "RETURNING id",
              trial_id, step, size_bytes, NowMs())[0][0]
             .as<int64_t>();
  }));
  return std::unique_ptr<CheckpointWriter>(
      new PostgresWriter(*this, std::move(c), id, trial_id, size_bytes));
}

Result<std::unique_ptr<CheckpointReader>> PostgresArtifactStore::Open(Id trial_id) {
  // A checkpoint replaced between the look-up and the snapshot is looked up
  // again: the reader must read the one its snapshot holds.
  for (int attempt = 0; attempt < 3; ++attempt) {
    HPO_ASSIGN_OR_RETURN(Lease c, Connect());
    std::optional<std::pair<int64_t, CheckpointInfo>> found;
    HPO_RETURN_IF_ERROR(Guard(display_, c.broken, [&] {
      pqxx::nontransaction n(*c);
      const pqxx::result r = n.exec_params(
          "SELECT id, step, size_bytes, sha256 FROM checkpoint_uploads WHERE trial_id = $1 AND "
          "committed_ms IS NOT "
          "NULL",
          trial_id);
      if (!r.empty()) {
        found.emplace(r[0][0].as<int64_t>(),
                      CheckpointInfo{r[0][1].as<int64_t>(), r[0][2].as<int64_t>(),
                                     r[0][3].as<std::string>()});
      }
    }));
    if (!found) return Status::NotFound("trial " + std::to_string(trial_id) + " has no checkpoint");
    auto reader = std::make_unique<PostgresReader>(*this, std::move(c), found->first, found->second,
                                                   trial_id);
    HPO_RETURN_IF_ERROR(reader->Start());
    if (!reader->replaced()) return std::unique_ptr<CheckpointReader>(std::move(reader));
  }
  return Status::Aborted("trial " + std::to_string(trial_id) +
                         "'s checkpoint kept being replaced; try again");
}

}  // namespace

Result<std::unique_ptr<ArtifactStore>> OpenPostgresArtifactStore(const std::string& url,
                                                                 ArtifactStoreOptions options) {
  HPO_ASSIGN_OR_RETURN(StoreUrl parsed, ParseStoreUrl(url));
  if (parsed.backend != StoreUrl::Backend::kPostgresql) {
    return Status::InvalidArgument("--artifacts postgresql needs a PostgreSQL store, not " +
                                   parsed.display);
  }
  if (options.max_checkpoint_bytes < 0)
    return Status::InvalidArgument("max_checkpoint_bytes: must be >= 0");
  auto store = std::make_unique<PostgresArtifactStore>(parsed.target, parsed.display, options);
  // Fail at start-up, not at the first pause, when the tables are missing.
  HPO_RETURN_IF_ERROR(store->List().status());
  return std::unique_ptr<ArtifactStore>(std::move(store));
}

}  // namespace hpo::store
