// The one place where hpo::Status and grpc::Status meet (DESIGN.md: errors
// are converted to gRPC codes in exactly one file). Messages pass through
// unchanged in both directions, so a field path such as
// "devices[1].name: must not be empty" reaches the worker as written.
#pragma once

#include <grpcpp/support/status.h>

#include "common/status.h"

namespace hpo::server {

// OK -> OK; each hpo::StatusCode to the gRPC code of the same name
// (Internal, and anything without a counterpart, to INTERNAL).
::grpc::Status ToGrpcStatus(const Status& s);

// The reverse, for callers of a gRPC service. UNKNOWN becomes Internal and
// OUT_OF_RANGE becomes InvalidArgument (hpo has no such codes).
Status FromGrpcStatus(const ::grpc::Status& s);

}  // namespace hpo::server
