// IsRetryable: the one rule for which failures a caller may retry.
#include "common/status.h"

#include <gtest/gtest.h>

namespace hpo {
namespace {

TEST(IsRetryableTest, TransientFailuresAreRetryable) {
  // A lost race (a PostgreSQL serialization failure), an outage, a slow
  // answer, a full disk: each may pass if the caller asks again later.
  EXPECT_TRUE(IsRetryable(Status::Aborted("could not serialize access due to concurrent update")));
  EXPECT_TRUE(IsRetryable(Status::Unavailable("connection lost")));
  EXPECT_TRUE(IsRetryable(Status::DeadlineExceeded("no answer within 30 s")));
  EXPECT_TRUE(IsRetryable(Status::ResourceExhausted("database or disk is full")));
}

TEST(IsRetryableTest, WrongRequestsAndBrokenStateAreNot) {
  for (const Status& s :
       {Status::OK(), Status::Cancelled("c"), Status::InvalidArgument("step: must not be negative"),
        Status::NotFound("trial 7 does not exist"), Status::AlreadyExists("a"),
        Status::PermissionDenied("p"), Status::FailedPrecondition("the lease is held by 'w2'"),
        Status::Unimplemented("u"), Status::Internal("bug"), Status::DataLoss("corrupt"),
        Status::Unauthenticated("no token")}) {
    EXPECT_FALSE(IsRetryable(s)) << s;
  }
}

}  // namespace
}  // namespace hpo
