#include "server/http/http_status.h"

#include <nlohmann/json.hpp>

namespace hpo::server {

namespace {

// The cause applies only to the code it refines, so a cause passed with
// the wrong code cannot turn, say, an outage into a 413.
HttpCause Applicable(const Status& s, HttpCause cause) {
  switch (cause) {
    case HttpCause::kNone:
      return cause;
    case HttpCause::kBodyTooLarge:
    case HttpCause::kHeadersTooLarge:
      return s.code() == StatusCode::kResourceExhausted ? cause : HttpCause::kNone;
    case HttpCause::kUnsupportedMediaType:
      return s.code() == StatusCode::kInvalidArgument ? cause : HttpCause::kNone;
  }
  return HttpCause::kNone;
}

}  // namespace

int HttpStatusFor(const Status& s, HttpCause cause) {
  switch (Applicable(s, cause)) {
    case HttpCause::kNone:
      break;
    case HttpCause::kBodyTooLarge:
      return 413;
    case HttpCause::kHeadersTooLarge:
      return 431;
    case HttpCause::kUnsupportedMediaType:
      return 415;
  }
  switch (s.code()) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAborted:
      return 409;
    case StatusCode::kResourceExhausted:
      return 429;
    case StatusCode::kCancelled:
      return 499;
    case StatusCode::kUnimplemented:
      return 501;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kDeadlineExceeded:
      return 504;
    case StatusCode::kInternal:
    case StatusCode::kDataLoss:
      return 500;
  }
  return 500;
}

HttpResponse ErrorResponse(const Status& s, HttpCause cause) {
  cause = Applicable(s, cause);
  HttpResponse r;
  r.status = HttpStatusFor(s, cause);
  // Messages may quote what a client sent; bytes that are not UTF-8 become
  // U+FFFD instead of an exception.
  r.body =
      nlohmann::json{
          {"error", {{"code", std::string(StatusCodeName(s.code()))}, {"message", s.message()}}}}
          .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // The same rule as every other retry decision: a lost race (409), a full
  // disk (429), an outage (503) or a slow answer (504) may pass; a client
  // that honours Retry-After tries again after a second. A request too
  // large for the server is refused the same way each time.
  if (IsRetryable(s) && cause != HttpCause::kBodyTooLarge && cause != HttpCause::kHeadersTooLarge) {
    r.headers["Retry-After"] = "1";
  }
  return r;
}

}  // namespace hpo::server
