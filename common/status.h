// Status and Result<T>: the one error type used across HeteroTune.
//
// Errors are values, never exceptions across module boundaries. A Status is
// named by what the caller should do about it:
//   InvalidArgument / NotFound / AlreadyExists / FailedPrecondition: the
//     request is wrong for the current state; do not retry unchanged.
//   Unavailable: a dependency (database, server) is unreachable; retry later.
//   Aborted: a concurrent change won a race; retry the whole operation.
//   Internal / DataLoss: a bug or corruption; give up and report.
// IsRetryable below is the one rule for which of them a caller may retry.
// They are converted to HTTP and gRPC codes in exactly one place each.
#pragma once

#include <cassert>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace hpo {

enum class StatusCode {
  kOk = 0,
  kCancelled,
  kInvalidArgument,
  kDeadlineExceeded,
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,
  kResourceExhausted,
  kFailedPrecondition,
  kAborted,
  kUnimplemented,
  kInternal,
  kUnavailable,
  kDataLoss,
  kUnauthenticated,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  static Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status DeadlineExceeded(std::string m) {
    return {StatusCode::kDeadlineExceeded, std::move(m)};
  }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status PermissionDenied(std::string m) {
    return {StatusCode::kPermissionDenied, std::move(m)};
  }
  static Status ResourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }
  static Status FailedPrecondition(std::string m) {
    return {StatusCode::kFailedPrecondition, std::move(m)};
  }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  static Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
  static Status Unauthenticated(std::string m) {
    return {StatusCode::kUnauthenticated, std::move(m)};
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  bool IsNotFound() const { return code_ == StatusCode::kNotFound; }
  bool IsInvalidArgument() const { return code_ == StatusCode::kInvalidArgument; }
  bool IsFailedPrecondition() const { return code_ == StatusCode::kFailedPrecondition; }
  bool IsUnavailable() const { return code_ == StatusCode::kUnavailable; }
  bool IsAborted() const { return code_ == StatusCode::kAborted; }

  // Returns a copy whose message is "<context>: <message>".
  Status WithContext(std::string_view context) const;

  // "NotFound: trial 7 does not exist", or "OK".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

std::ostream& operator<<(std::ostream& os, const Status& s);

// Whether the same call, made again unchanged after a pause, may succeed: the
// failure came from the moment, not from the request. The one rule for every
// retry decision (the store, the worker, the benches); true for
//   Unavailable: the server or database could not be reached or went away
//     mid-call (a restart, a dropped connection, SQLite busy);
//   Aborted: a concurrent transaction won a race (a PostgreSQL serialization
//     failure or deadlock, SQLSTATE 40001 / 40P01); the loser was rolled back
//     whole, so nothing of it was applied;
//   DeadlineExceeded: no answer in time (a server restarting or overloaded);
//   ResourceExhausted: a disk is full or a load limit was hit; it passes when
//     space or capacity comes back (HTTP 429: retry later). A request that is
//     itself over a size limit fails the same way each time: a caller that
//     can send one (a checkpoint upload) must not retry it.
// and false for everything else: the request is wrong for the current state
// (InvalidArgument, NotFound, FailedPrecondition, ...) or something is broken
// (Internal, DataLoss), and asking again would only hide it.
//
// Retrying is safe only for an operation whose repeat is harmless: a whole
// transaction run again from the start, or a call the server makes
// idempotent (reports per (trial, step), completions). Unavailable and
// DeadlineExceeded may arrive after the server applied the call.
bool IsRetryable(const Status& s);

// Holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "Result built from an OK Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }

  // REQUIRES: ok()
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  // By value, so `for (auto& x : *MakeResult())` does not dangle.
  T value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  T value_or(T fallback) const& { return ok() ? value() : std::move(fallback); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace hpo

#define HPO_CONCAT_INNER_(a, b) a##b
#define HPO_CONCAT_(a, b) HPO_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define HPO_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::hpo::Status hpo_status_ = (expr);        \
    if (!hpo_status_.ok()) return hpo_status_; \
  } while (0)

// `HPO_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from the Result's value,
// or returns its Status from the enclosing function.
#define HPO_ASSIGN_OR_RETURN(lhs, rexpr) \
  HPO_ASSIGN_OR_RETURN_IMPL_(HPO_CONCAT_(hpo_result_, __LINE__), lhs, rexpr)
#define HPO_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                               \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
