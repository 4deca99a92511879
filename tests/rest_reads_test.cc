// Reads that scale: ?since=<cursor> on trials and learning
// curves, and keyset pages of trials, over a real HTTP server on each store
// backend (typed tests; PostgreSQL with HPO_TEST_PG_*).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <type_traits>

#include "common/http_client.h"
#include "server/http/api.h"
#include "testing/store_backends.h"
#include "testing/world.h"

namespace hpo::server {
namespace {

using nlohmann::json;

const char* kSpec = R"(
name: reads-test
objective: {metric: loss, direction: minimize}
spaces:
  - name: main
    params:
      x: {type: float, low: -1, high: 1}
budget: {max_trials: 50, max_parallel: 50, steps_per_trial: 3}
executor: {client: {}}
)";

template <typename Backend>
class RestReadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HPO_REQUIRE_BACKEND(Backend);
    backend_ = std::make_unique<Backend>();
    Start();
    experiment_ = CallJson("POST", "/api/v1/experiments", 201, kSpec)["id"];
  }
  void TearDown() override { Stop(); }

  // A server on the backend's database; again after Stop(), as a restart.
  void Start() {
    testing::WorldOptions wo;
    wo.store_url = backend_->url();
    wo.store.clock = clock_.fn();
    auto world = testing::World::Create(std::move(wo));
    ASSERT_TRUE(world.ok()) << world.status();
    world_ = std::move(world).value();
    HttpServerOptions ho;
    ho.port = 0;
    world_->api().Attach(ho);
    auto server =
        HttpServer::Start(ho, [this](const HttpRequest& r) { return world_->api().Handle(r); });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    client_.port = server_->port();
  }
  void Stop() {
    if (server_) server_->Shutdown();
    server_.reset();
    world_.reset();
  }

  json CallJson(const std::string& method, const std::string& target, int want_status,
                const std::string& body = "") {
    auto r = HttpRequestOnce(client_, method, target, body);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return json();
    EXPECT_EQ(r->status, want_status) << method << " " << target << ": " << r->body;
    return json::parse(r->body, nullptr, false);
  }
  std::string Path(const std::string& rest) {
    return "/api/v1/experiments/" + std::to_string(experiment_) + rest;
  }

  std::vector<store::TrialRecord> MakeTrials(int n) {
    auto r = world_->store().CreateTrials(experiment_, std::vector<store::NewTrial>(n));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<store::TrialRecord>{};
  }
  void Lease(const store::TrialRecord& t) {
    auto r = world_->store().LeaseTrial(t.id, "tester", 1000);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  void Report(const store::TrialRecord& t, int64_t step, double loss) {
    store::Measurement m;
    m.step = step;
    m.metrics_json = json{{"loss", loss}}.dump();
    auto r = world_->store().ReportMeasurement(t.id, "tester", m, std::nullopt);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  static std::vector<int64_t> Numbers(const json& answer) {
    std::vector<int64_t> out;
    for (const auto& t : answer["trials"]) out.push_back(t["number"]);
    return out;
  }

  testing::FakeClock clock_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<testing::World> world_;
  std::unique_ptr<HttpServer> server_;
  HttpClientOptions client_;
  int64_t experiment_ = 0;
};

using Backends = ::testing::Types<testing::SqliteBackend, testing::PostgresBackend>;
// Whether a cursor returns exactly what changed after it (SQLite's one
// writer numbers commits) or possibly more (PostgreSQL: see README).
template <typename Backend>
constexpr bool kExact = std::is_same_v<Backend, testing::SqliteBackend>;
struct BackendNames {
  template <typename T>
  static std::string GetName(int) {
    return T::kName;
  }
};
TYPED_TEST_SUITE(RestReadsTest, Backends, BackendNames);

TYPED_TEST(RestReadsTest, SinceACursorOnlyTheTrialsAndPointsThatChangedComeBack) {
  auto trials = this->MakeTrials(4);
  this->Lease(trials[1]);
  const json full = this->CallJson("GET", this->Path("/trials?limit=100"), 200);
  ASSERT_EQ(full["trials"].size(), 4u);
  const std::string cursor = full["cursor"];

  this->Report(trials[1], 1, 0.5);  // trial 1 changes (leased -> running) and gains a point
  this->Lease(trials[2]);           // trial 2 changes
  const json changed = this->CallJson("GET", this->Path("/trials?since=" + cursor), 200);
  const json curves = this->CallJson("GET", this->Path("/measurements?since=" + cursor), 200);
  const std::string latest = curves["cursor"];
  const json after_trials = this->CallJson("GET", this->Path("/trials?since=" + latest), 200);
  const json after_curves = this->CallJson("GET", this->Path("/measurements?since=" + latest), 200);
  if (!kExact<TypeParam>) {
    // PostgreSQL's horizon is the cluster's: another database's open
    // transaction (ctest runs tests side by side on one server) holds it
    // back, and what changed since then comes again. Never less.
    const std::vector<int64_t> got = this->Numbers(changed);
    for (int64_t n : {1, 2})
      EXPECT_NE(std::find(got.begin(), got.end(), n), got.end()) << changed.dump();
    return;
  }
  EXPECT_EQ(this->Numbers(changed), (std::vector<int64_t>{1, 2}));
  ASSERT_EQ(curves["trials"].size(), 1u) << curves.dump();
  EXPECT_EQ(curves["trials"][0]["trial_id"], trials[1].id);
  EXPECT_EQ(curves["trials"][0]["steps"], json::array({1}));  // the new point only
  EXPECT_EQ(curves["trials"][0]["replace"], false);

  // Nothing changed after the latest cursor: nothing comes back.
  EXPECT_TRUE(after_trials["trials"].empty()) << after_trials.dump();
  EXPECT_TRUE(after_curves["trials"].empty()) << after_curves.dump();

  // A running trial's next point comes back; the trial does not, as its
  // row did not change (a report writes a running trial's row only to renew
  // its lease: Store::ReportRenewsBefore).
  this->Report(trials[1], 2, 0.4);
  EXPECT_TRUE(this->CallJson("GET", this->Path("/trials?since=" + latest), 200)["trials"].empty());
  const json point = this->CallJson("GET", this->Path("/measurements?since=" + latest), 200);
  ASSERT_EQ(point["trials"].size(), 1u) << point.dump();
  EXPECT_EQ(point["trials"][0]["steps"], json::array({2}));
}

TYPED_TEST(RestReadsTest, ACursorStaysGoodAcrossAServerRestart) {
  auto trials = this->MakeTrials(3);
  const std::string cursor = this->CallJson("GET", this->Path("/trials"), 200)["cursor"];
  this->Stop();
  this->Start();
  this->Lease(trials[2]);
  const std::vector<int64_t> got =
      this->Numbers(this->CallJson("GET", this->Path("/trials?since=" + cursor), 200));
  if (kExact<TypeParam>) {
    EXPECT_EQ(got, (std::vector<int64_t>{2}));
  } else {
    EXPECT_NE(std::find(got.begin(), got.end(), 2), got.end());  // and maybe more, never less
  }
}

TYPED_TEST(RestReadsTest, AnAttemptThatLostItsPointsReplacesTheTrialsCurve) {
  auto trials = this->MakeTrials(1);
  this->Lease(trials[0]);
  this->Report(trials[0], 0, 0.9);
  this->Report(trials[0], 1, 0.8);
  const std::string cursor = this->CallJson("GET", this->Path("/measurements"), 200)["cursor"];
  this->clock_.Advance(5000);  // the 1 s lease expired: the attempt's points are deleted
  ASSERT_TRUE(this->world_->store().ReclaimExpiredLeases(5).ok());
  this->Lease(trials[0]);
  this->Report(trials[0], 0, 0.7);
  const json curves = this->CallJson("GET", this->Path("/measurements?since=" + cursor), 200);
  ASSERT_EQ(curves["trials"].size(), 1u) << curves.dump();
  EXPECT_EQ(curves["trials"][0]["replace"], true);
  EXPECT_EQ(curves["trials"][0]["steps"], json::array({0}));
  EXPECT_EQ(curves["trials"][0]["values"], json::array({0.7}));
}

TYPED_TEST(RestReadsTest, ACursorOfAnotherStoreAsksForAFullRead) {
  const std::string cursor = this->CallJson("GET", this->Path("/trials"), 200)["cursor"];
  const std::string store_id = cursor.substr(0, cursor.rfind('-'));
  for (const std::string& other :
       {std::string("0123456789abcdef-1"), store_id + "-999999999999999"}) {
    const json e = this->CallJson("GET", this->Path("/trials?since=" + other), 409);
    EXPECT_NE(e.dump().find("without since"), std::string::npos) << e.dump();
    this->CallJson("GET", this->Path("/measurements?since=" + other), 409);
  }
  // A revision past int64 is not a cursor either (it once read as 0: a full read).
  this->CallJson("GET", this->Path("/trials?since=" + store_id + "-99999999999999999999"), 400);
  const json bad = this->CallJson("GET", this->Path("/trials?since=12"), 400);
  EXPECT_NE(bad.dump().find("since"), std::string::npos) << bad.dump();
}

// Keyset pages do not skip trials that leave the filter between pages, as
// offset pages do.
TYPED_TEST(RestReadsTest, KeysetPagesMissNoTrialWhileTheFilterChanges) {
  auto trials = this->MakeTrials(6);
  const json first = this->CallJson("GET", this->Path("/trials?state=pending&limit=2"), 200);
  EXPECT_EQ(this->Numbers(first), (std::vector<int64_t>{0, 1}));
  ASSERT_EQ(first["next_after"], 1);
  this->Lease(trials[0]);
  this->Lease(trials[1]);
  std::vector<int64_t> seen;
  json page = first;
  while (!page["next_after"].is_null()) {
    page = this->CallJson("GET",
                          this->Path("/trials?state=pending&limit=2&after=" +
                                     std::to_string(page["next_after"].get<int64_t>())),
                          200);
    for (int64_t n : this->Numbers(page)) seen.push_back(n);
  }
  EXPECT_EQ(seen, (std::vector<int64_t>{2, 3, 4, 5}));
  this->CallJson("GET", this->Path("/trials?after=1&offset=2"), 400);
}

}  // namespace
}  // namespace hpo::server
