// The one place where hpo::Status and grpc::Status meet (DESIGN.md: errors
// are converted to gRPC codes in exactly one file). Messages pass through
// unchanged in both directions, so a field path such as
// "devices[1].name: must not be empty" reaches the worker as written.
// Part of hpo_proto, so that both ends of the worker protocol use it: the
// server's service answers with ToGrpcStatus; the worker and the benches'
// simulated workers read answers with FromGrpcStatus and decide on retries
// with IsRetryable (common/status.h), never on raw gRPC codes.
#pragma once

#include <grpcpp/support/status.h>

#include "common/status.h"

namespace hpo {

// OK -> OK; each hpo::StatusCode to the gRPC code of the same name
// (Internal, and anything without a counterpart, to INTERNAL).
::grpc::Status ToGrpcStatus(const Status& s);

// The reverse, for callers of a gRPC service. UNKNOWN becomes Internal and
// OUT_OF_RANGE becomes InvalidArgument (hpo has no such codes).
Status FromGrpcStatus(const ::grpc::Status& s);

// How many times in all a client of the worker protocol makes a call the
// server answers ABORTED (IsRetryable: a lost race). The server has already
// run the call's transaction several times by then (store.h:
// kMaxConflictAttempts); a few tries more ride out a longer burst of
// contention, and a call that cannot win ends instead of spinning. Reports
// and completions are idempotent on the server, so a repeat is harmless.
inline constexpr int kMaxAbortedAttempts = 5;

// How many times in all a worker tries to send (or fetch) one checkpoint
// whose transfer failed with an error IsRetryable accepts, short of a
// refusal that will not pass (RESOURCE_EXHAUSTED: a size over the server's
// limit). Then it pauses the trial without one: a checkpoint is worth a few
// tries, not a lease that runs out. One it could not fetch is left where it
// is: the worker gives the trial back to resume later, and restarts it
// from step 0 only when the checkpoint is missing or damaged.
inline constexpr int kCheckpointTransferAttempts = 3;

}  // namespace hpo
