// CommitBatcher: group commit for the store's small, hot writes (reports,
// heartbeats, completions; on SQLite the trials made for leases too).
// Calls that arrive while a batch is committing (or within the window, when
// there is one) queue up and commit together in one transaction, so a
// fleet's reports cost one commit (one fsync on SQLite, one WAL flush on
// PostgreSQL) per batch rather than one each.
//
// What a caller may rely on:
//  * Submit returns only once the transaction that holds its call committed
//    (OK) or its call failed; a call is never acknowledged before its commit.
//  * A call's failure is its own: the committer runs the calls without
//    savepoints first and, when one fails, rolls the batch back and runs it
//    again with each call inside a savepoint, rolled back to on that call's
//    error, so the other calls of the batch still commit
//    (SqlStore::CommitBatch). A call's work may therefore run twice.
//  * The batcher itself knows nothing of SQL: it groups calls (common/
//    batcher.h) and hands each group, in `order`, to the commit function it
//    was built with, on the thread of the call at the head of the queue.
//
// Internal to server/store.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/batcher.h"
#include "common/status.h"
#include "server/store/sql_driver.h"

namespace hpo::store {

class CommitBatcher {
 public:
  // One caller's write: statements on the batch's connection, inside its
  // transaction. It reports failure by throwing (SqlError), as a Run body
  // does, and keeps its result in the caller's variables; it may run more
  // than once (a batch that lost a race runs again from the start).
  struct Call {
    std::function<void(SqlConnection&)> work;
    // The transaction it would have run in on its own: how the committer
    // runs a batch of this call alone (PostgreSQL's kSingle skips
    // BEGIN/COMMIT, so a lone call costs what it did before batching).
    SqlConnection::TxMode mode = SqlConnection::TxMode::kWrite;
    // Calls run in this order within a batch (then in arrival order): the
    // trial (or worker) id the call locks, so that two batches committing
    // at once on PostgreSQL lock rows in one order and do not deadlock.
    int64_t order = 0;
  };

  // Runs `batch` (in `order`) and returns one Status per call, in the
  // batch's order. REQUIRES: returns batch.size() statuses.
  using CommitFn = std::function<std::vector<Status>(const std::vector<const Call*>& batch)>;

  struct Options {
    // At most this many calls per transaction. PostgreSQL keeps up to 64
    // subtransaction ids per backend in shared memory before every snapshot
    // has to look further (pg_subtrans); each savepoint that writes takes
    // one, so a batch stays below that.
    int max_batch = 32;
    // How long the leader waits for more calls before it commits, when
    // fewer than max_batch are queued. 0: it commits at once, and only the
    // calls that queued while earlier batches were committing join it.
    std::chrono::microseconds window{0};
    // Batches committing at once (each on its own connection). SQLite has
    // one writer, so 1; PostgreSQL: a share of the pool, the rest left to
    // leases and reads.
    int max_in_flight = 1;
  };

  CommitBatcher(Options options, CommitFn commit);
  CommitBatcher(const CommitBatcher&) = delete;
  CommitBatcher& operator=(const CommitBatcher&) = delete;

  // Queues `call`, waits for the batch that holds it, and returns its
  // status. `call` must stay valid until then (it lives on the caller's
  // stack). Thread-safe.
  Status Submit(const Call& call);

 private:
  Batcher<const Call> batcher_;
};

}  // namespace hpo::store
