// The one place a Status becomes an HTTP answer (as proto/grpc_status.h is
// for gRPC): the status number, the {"error": {"code", "message"}} body and
// Retry-After. The REST routes (server/http/api.cc), the browser guard and
// the HTTP server's own refusals (a body too large, a malformed request, a
// handler that threw) all answer errors through ErrorResponse, so no
// status number is written by hand anywhere else.
#pragma once

#include "common/status.h"
#include "server/http/http_server.h"

namespace hpo::server {

// Where HTTP names a failure more precisely than the Status code does. A
// cause, never a number: the number is chosen in HttpStatusFor only.
enum class HttpCause {
  kNone,
  // ResourceExhausted for a request body over the server's limit: 413, not
  // the 429 of a load limit, and no Retry-After, because the same request
  // fails the same way each time (see IsRetryable).
  kBodyTooLarge,
  // ResourceExhausted for request headers over the limit: 431, no Retry-After.
  kHeadersTooLarge,
  // InvalidArgument for a Content-Type the route does not take: 415.
  kUnsupportedMediaType,
};

// HTTP status for an error Status: InvalidArgument 400, Unauthenticated 401,
// PermissionDenied 403, NotFound 404, AlreadyExists / FailedPrecondition /
// Aborted 409, ResourceExhausted 429, Cancelled 499, Internal / DataLoss
// 500, Unimplemented 501, Unavailable 503, DeadlineExceeded 504. A cause
// refines its own code only (kBodyTooLarge 413 and kHeadersTooLarge 431 for
// ResourceExhausted, kUnsupportedMediaType 415 for InvalidArgument); with
// another code it is ignored.
int HttpStatusFor(const Status& s, HttpCause cause = HttpCause::kNone);

// {"error": {"code": "InvalidArgument", "message": "..."}} with the status
// HttpStatusFor gives, and "Retry-After: 1" when the error is retryable
// (IsRetryable) and no cause says the same request would fail again.
// REQUIRES: !s.ok()
HttpResponse ErrorResponse(const Status& s, HttpCause cause = HttpCause::kNone);

}  // namespace hpo::server
