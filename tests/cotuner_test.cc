#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "scheduler/cotuner.h"

namespace hpo::scheduler {
namespace {

using nlohmann::json;

std::vector<SystemDimension> Dims() {
  return {{"threads", {1, 2, 4}, true}, {"batch_size", {64, 128, 256}, true}, {"device", {"cpu"}, false}};
}

// A machine where 2 threads and batch 256 are fastest.
double Speed(const json& s) {
  const int t = s["threads"], b = s["batch_size"];
  return 1000.0 * (t == 2 ? 2.0 : t == 4 ? 1.5 : 1.0) * (b == 256 ? 1.3 : b == 128 ? 1.0 : 0.8);
}

TEST(CoTuner, CoordinateSearchFindsTheFastestAndSettles) {
  std::vector<EpochSpeed> h;
  json setting = {{"threads", 1}, {"batch_size", 128}, {"device", "cpu"}};
  std::vector<std::string> reasons;
  for (int epoch = 0; epoch < 10; ++epoch) {
    h.push_back({setting, Speed(setting)});
    auto d = NextSetting(Dims(), h, setting);
    reasons.push_back(d.reason);
    setting = d.setting;
  }
  EXPECT_EQ(setting["threads"], 2);
  EXPECT_EQ(setting["batch_size"], 256);
  EXPECT_EQ(setting["device"], "cpu") << "immutable dimensions never change mid-trial";
  EXPECT_EQ(reasons.back(), "settled");
  // At most max_probes + 1 distinct settings were run.
  std::set<std::string> distinct;
  for (const auto& e : h) distinct.insert(SettingKey(e.setting));
  EXPECT_LE(distinct.size(), 5u);
}

// A program that applies what it is asked shows no ignored change; one that
// keeps running its first setting is caught at the first epoch after the
// first probe, and one that applies threads but not batch_size at the first
// epoch that probed batch_size.
TEST(CoTuner, FirstIgnoredChangeFindsAProgramThatDoesNotApplySettings) {
  auto run = [](std::function<json(const json& asked, const json& running)> apply) {
    std::vector<EpochSpeed> h;
    json running = {{"threads", 1}, {"batch_size", 128}, {"device", "cpu"}};
    for (int epoch = 0; epoch < 8; ++epoch) {
      h.push_back({running, Speed(running)});
      running = apply(NextSetting(Dims(), h, running).setting, running);
    }
    return h;
  };
  EXPECT_FALSE(FirstIgnoredChange(Dims(), run([](const json& asked, const json&) { return asked; })));
  EXPECT_EQ(FirstIgnoredChange(Dims(), run([](const json&, const json& running) { return running; })), 1u);
  const auto h = run([](const json& asked, const json& running) {
    json s = running;
    s["threads"] = asked["threads"];
    return s;
  });
  const auto ignored = FirstIgnoredChange(Dims(), h);
  ASSERT_TRUE(ignored);
  EXPECT_GT(*ignored, 1u) << "threads were applied";
  EXPECT_EQ(h[*ignored].setting["batch_size"], 128);
  std::vector<EpochSpeed> before(h.begin(), h.begin() + static_cast<long>(*ignored));
  EXPECT_NE(NextSetting(Dims(), before, before.back().setting).setting["batch_size"], 128)
      << "the epoch it names was asked for another batch size";
}

TEST(CoTuner, NoHistoryKeepsTheStartAndDriftRestartsProbing) {
  json start = {{"threads", 2}, {"batch_size", 256}};
  EXPECT_EQ(NextSetting(Dims(), {}, start).setting, start);
  // Settled at the start setting, then the machine slows down by half.
  std::vector<EpochSpeed> h;
  CoTuneOptions o;
  o.max_probes = 0;
  h.push_back({start, 2600});
  h.push_back({start, 2600});
  auto settled = NextSetting(Dims(), h, start, o);
  EXPECT_FALSE(settled.probing);
  h.push_back({start, 1200});
  o.max_probes = 4;
  auto d = NextSetting(Dims(), h, start, o);
  EXPECT_TRUE(d.probing);
  EXPECT_NE(d.reason.find("drift"), std::string::npos) << d.reason;
  EXPECT_NE(d.setting, start);
}

TEST(CoTuner, CandidateValuesFollowTheDomain) {
  search::Param threads;
  threads.name = "threads";
  threads.kind = search::ParamKind::kInt;
  threads.low = 1;
  threads.high = 4;
  threads.step = 1;
  EXPECT_EQ(CandidateValues(threads), (std::vector<json>{1, 2, 3, 4}));
  search::Param batch = threads;
  batch.low = 32;
  batch.high = 512;
  batch.log = true;
  EXPECT_EQ(CandidateValues(batch), (std::vector<json>{32, 64, 128, 256, 512}));
  search::Param dev;
  dev.kind = search::ParamKind::kCategorical;
  dev.choices = {"cpu", "cuda:0"};
  EXPECT_EQ(CandidateValues(dev).size(), 2u);
}

}  // namespace
}  // namespace hpo::scheduler
