// The `since` cursor of the REST list routes (trials, measurements): what a
// client sends back to read only what changed after its last read.
//
// A cursor is "<store id>-<revision>" (store::ReadCursor): opaque to
// clients, which take it from one answer's "cursor" and send it as ?since=
// on the next read. A cursor stays good across restarts of the server and
// of the database. One from another database (another server's, or one
// restored from an older backup: its revision lies ahead of this store's)
// cannot be applied: the client must read everything again, without since.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "server/http/http_server.h"
#include "server/store/store.h"

namespace hpo::server {

std::string FormatCursor(const store::ReadCursor& c);

// The revision to read from for the request's ?since= (nullopt without one),
// given where the store stands now. InvalidArgument: not a cursor.
// FailedPrecondition (409): a cursor of another store, or ahead of this one;
// the message says to read again without since.
Result<std::optional<int64_t>> SinceRevision(const HttpRequest& req, const store::ReadCursor& now);

}  // namespace hpo::server
