// proto/held_listing.h: when a worker's Lease lists the trials it holds.
// hpo-worker and the simulated workers both follow it; worker_retry_test.cc
// checks the rule end to end with a real hpo-worker.
#include "proto/held_listing.h"

#include <gtest/gtest.h>

namespace hpo {
namespace {

TEST(HeldListing, AWorkerListsOnItsFirstLeaseAndNotAfterItWentThrough) {
  HeldListing listing;
  HeldListing::Try first = listing.Next();
  EXPECT_TRUE(first.list) << "a worker starts unsure";
  listing.WentThrough(first);
  for (int i = 0; i < 3; ++i) {
    const HeldListing::Try next = listing.Next();
    EXPECT_FALSE(next.list) << "lease " << i + 2 << ": no call failed";
    listing.WentThrough(next);
  }
}

TEST(HeldListing, AFailedCallMakesTheNextLeaseListUntilOneGoesThrough) {
  HeldListing listing;
  listing.WentThrough(listing.Next());
  listing.CallFailed();  // say a report refused: its trial is given up
  const HeldListing::Try lost = listing.Next();
  EXPECT_TRUE(lost.list);
  // That Lease failed too (its answer lost): not settled, and the retry lists.
  listing.CallFailed();
  const HeldListing::Try retry = listing.Next();
  EXPECT_TRUE(retry.list);
  listing.WentThrough(retry);
  EXPECT_FALSE(listing.Next().list);
}

TEST(HeldListing, AFailureWhileALeaseIsInFlightIsNotSettledByIt) {
  HeldListing listing;
  const HeldListing::Try t = listing.Next();
  ASSERT_TRUE(t.list);
  listing.CallFailed();  // another device's call, after this Lease decided
  listing.WentThrough(t);
  EXPECT_TRUE(listing.Next().list) << "the trial given up meanwhile was not in that listing";
}

}  // namespace
}  // namespace hpo
