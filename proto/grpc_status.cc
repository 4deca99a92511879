#include "proto/grpc_status.h"

namespace hpo {

namespace {

::grpc::StatusCode ToGrpcCode(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return ::grpc::StatusCode::OK;
    case StatusCode::kCancelled:
      return ::grpc::StatusCode::CANCELLED;
    case StatusCode::kInvalidArgument:
      return ::grpc::StatusCode::INVALID_ARGUMENT;
    case StatusCode::kDeadlineExceeded:
      return ::grpc::StatusCode::DEADLINE_EXCEEDED;
    case StatusCode::kNotFound:
      return ::grpc::StatusCode::NOT_FOUND;
    case StatusCode::kAlreadyExists:
      return ::grpc::StatusCode::ALREADY_EXISTS;
    case StatusCode::kPermissionDenied:
      return ::grpc::StatusCode::PERMISSION_DENIED;
    case StatusCode::kResourceExhausted:
      return ::grpc::StatusCode::RESOURCE_EXHAUSTED;
    case StatusCode::kFailedPrecondition:
      return ::grpc::StatusCode::FAILED_PRECONDITION;
    case StatusCode::kAborted:
      return ::grpc::StatusCode::ABORTED;
    case StatusCode::kUnimplemented:
      return ::grpc::StatusCode::UNIMPLEMENTED;
    case StatusCode::kInternal:
      return ::grpc::StatusCode::INTERNAL;
    case StatusCode::kUnavailable:
      return ::grpc::StatusCode::UNAVAILABLE;
    case StatusCode::kDataLoss:
      return ::grpc::StatusCode::DATA_LOSS;
    case StatusCode::kUnauthenticated:
      return ::grpc::StatusCode::UNAUTHENTICATED;
  }
  return ::grpc::StatusCode::INTERNAL;
}

StatusCode FromGrpcCode(::grpc::StatusCode code) {
  switch (code) {
    case ::grpc::StatusCode::OK:
      return StatusCode::kOk;
    case ::grpc::StatusCode::CANCELLED:
      return StatusCode::kCancelled;
    case ::grpc::StatusCode::INVALID_ARGUMENT:
    case ::grpc::StatusCode::OUT_OF_RANGE:
      return StatusCode::kInvalidArgument;
    case ::grpc::StatusCode::DEADLINE_EXCEEDED:
      return StatusCode::kDeadlineExceeded;
    case ::grpc::StatusCode::NOT_FOUND:
      return StatusCode::kNotFound;
    case ::grpc::StatusCode::ALREADY_EXISTS:
      return StatusCode::kAlreadyExists;
    case ::grpc::StatusCode::PERMISSION_DENIED:
      return StatusCode::kPermissionDenied;
    case ::grpc::StatusCode::RESOURCE_EXHAUSTED:
      return StatusCode::kResourceExhausted;
    case ::grpc::StatusCode::FAILED_PRECONDITION:
      return StatusCode::kFailedPrecondition;
    case ::grpc::StatusCode::ABORTED:
      return StatusCode::kAborted;
    case ::grpc::StatusCode::UNIMPLEMENTED:
      return StatusCode::kUnimplemented;
    case ::grpc::StatusCode::UNAVAILABLE:
      return StatusCode::kUnavailable;
    case ::grpc::StatusCode::DATA_LOSS:
      return StatusCode::kDataLoss;
    case ::grpc::StatusCode::UNAUTHENTICATED:
      return StatusCode::kUnauthenticated;
    default:  // INTERNAL, UNKNOWN and any code newer than this file
      return StatusCode::kInternal;
  }
}

}  // namespace

::grpc::Status ToGrpcStatus(const Status& s) {
  if (s.ok()) return ::grpc::Status::OK;
  return ::grpc::Status(ToGrpcCode(s.code()), s.message());
}

Status FromGrpcStatus(const ::grpc::Status& s) {
  if (s.ok()) return Status::OK();
  return Status(FromGrpcCode(s.error_code()), s.error_message());
}

}  // namespace hpo
