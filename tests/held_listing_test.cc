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
  EXPECT_TRUE(listing.Next().list);
  // Another call fails before that Lease is sent (a heartbeat): nothing is
  // settled, and the Lease, deciding again, still lists.
  listing.CallFailed();
  const HeldListing::Try next = listing.Next();
  EXPECT_TRUE(next.list);
  listing.WentThrough(next);
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

// A failed Lease's handler may still be granting on the server when its
// retry's listing is read: the Lease after the retry lists once more, by
// when that grant has committed.
TEST(HeldListing, AFailedLeaseIsCheckedAgainOneLeaseAfterItsRetryWentThrough) {
  HeldListing listing;
  listing.WentThrough(listing.Next());
  ASSERT_FALSE(listing.Next().list);
  listing.CallFailed();  // that Lease failed
  listing.LeaseFailed();
  const HeldListing::Try retry = listing.Next();
  EXPECT_TRUE(retry.list);
  listing.WentThrough(retry);
  const HeldListing::Try after = listing.Next();
  EXPECT_TRUE(after.list) << "the lease after the retry";
  listing.WentThrough(after);
  EXPECT_FALSE(listing.Next().list);
}

// Two devices: device A's trial is given up after a refused report while
// device B leases and lists it (it is still held). Once A's trial is gone,
// the next lease lists again; a trial that ends with no failure does not.
TEST(HeldListing, ATrialGivenUpWhileAnotherDeviceListedItIsListedAgainOnceItLeft) {
  HeldListing listing;
  listing.WentThrough(listing.Next());
  const int64_t a_leased = listing.failures();
  listing.CallFailed();  // A's report refused: A gives its trial up
  const HeldListing::Try b = listing.Next();
  ASSERT_TRUE(b.list);
  listing.WentThrough(b);  // B's listing still named A's trial
  ASSERT_FALSE(listing.Next().list);
  listing.TrialLeft(a_leased);
  EXPECT_TRUE(listing.Next().list);
  listing.WentThrough(listing.Next());

  const int64_t clean = listing.failures();
  listing.TrialLeft(clean);
  EXPECT_FALSE(listing.Next().list) << "no call failed while that trial ran";
}

}  // namespace
}  // namespace hpo
