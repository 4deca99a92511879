// The store-backed gauges of /metrics: two registries over two Store handles
// on one database (two server replicas) report the same totals, a change
// made through one handle shows on the other, and one read serves scrapes
// for max_age. Run on both backends.
#include "server/metrics/store_gauges.h"

#include <gtest/gtest.h>

#include <thread>

#include "testing/store_backends.h"

namespace hpo::server {
namespace {

using store::TrialState;

// The value of `sample` (a full sample name with labels) in a rendered page.
double Value(const std::string& page, const std::string& sample) {
  const auto at = page.find("\n" + sample + " ");
  if (at == std::string::npos) return -1;
  return std::stod(page.substr(at + sample.size() + 2));
}

template <typename Backend>
class StoreGaugesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HPO_REQUIRE_BACKEND(Backend);
    backend_ = std::make_unique<Backend>();
    for (auto* s : {&a_, &b_}) {
      auto opened = store::OpenStore(backend_->url());
      ASSERT_TRUE(opened.ok()) << opened.status();
      *s = std::move(opened).value();
    }
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<store::Store> a_, b_;  // two replicas' handles on one database
};

using Backends = ::testing::Types<hpo::testing::SqliteBackend, hpo::testing::PostgresBackend>;
struct BackendNames {
  template <typename T>
  static std::string GetName(int) {
    return T::kName;
  }
};
TYPED_TEST_SUITE(StoreGaugesTest, Backends, BackendNames);

TYPED_TEST(StoreGaugesTest, ReplicasOnOneDatabaseReportTheSameTotals) {
  metrics::Registry ra, rb;
  RegisterStoreGauges(ra, *this->a_, {std::chrono::milliseconds(0)});
  RegisterStoreGauges(rb, *this->b_, {std::chrono::milliseconds(0)});
  auto e = this->a_->CreateExperiment({"exp", "{}", {}});
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE(this->a_->CreateTrials(e->id, std::vector<store::NewTrial>(3)).ok());
  // Leased and finished through the other handle.
  auto t = this->b_->LeaseNextTrial({"worker/1", 60'000, std::nullopt, std::nullopt});
  ASSERT_TRUE(t.ok() && t->has_value()) << t.status();
  ASSERT_TRUE(this->b_->FinishTrial((*t)->id, "worker/1", {TrialState::kCompleted, "{}", ""}).ok());

  const std::string pa = ra.Render(), pb = rb.Render();
  EXPECT_EQ(pa, pb);
  EXPECT_EQ(Value(pa, R"(hpo_trials{state="pending"})"), 2) << pa;
  EXPECT_EQ(Value(pa, R"(hpo_trials{state="completed"})"), 1) << pa;
  EXPECT_EQ(Value(pa, R"(hpo_experiments{state="running"})"), 1) << pa;
  EXPECT_EQ(Value(pa, "hpo_workers"), 0) << pa;
}

TYPED_TEST(StoreGaugesTest, OneReadServesScrapesForMaxAge) {
  metrics::Registry r;
  RegisterStoreGauges(r, *this->a_, {std::chrono::milliseconds(300)});
  auto e = this->a_->CreateExperiment({"exp", "{}", {}});
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE(this->a_->CreateTrials(e->id, std::vector<store::NewTrial>(1)).ok());
  EXPECT_EQ(Value(r.Render(), R"(hpo_trials{state="pending"})"), 1);
  ASSERT_TRUE(this->b_->CreateTrials(e->id, std::vector<store::NewTrial>(1)).ok());
  // Within max_age the cached read answers, for every family of the page.
  EXPECT_EQ(Value(r.Render(), R"(hpo_trials{state="pending"})"), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  EXPECT_EQ(Value(r.Render(), R"(hpo_trials{state="pending"})"), 2);
}

}  // namespace
}  // namespace hpo::server
