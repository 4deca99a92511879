#include "scheduler/cotuner.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>

namespace hpo::scheduler {
namespace {

using nlohmann::json;

std::vector<SystemDimension> Dims() {
  return {{"threads", {1, 2, 4}, true},
          {"batch_size", {64, 128, 256}, true},
          {"device", {"cpu"}, false}};
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
  EXPECT_FALSE(
      FirstIgnoredChange(Dims(), run([](const json& asked, const json&) { return asked; })));
  const auto first =
      FirstIgnoredChange(Dims(), run([](const json&, const json& running) { return running; }));
  ASSERT_TRUE(first);
  EXPECT_EQ(first->epoch, 1u);
  // It names the parameter, what was asked and what ran (the engine's event says them).
  EXPECT_EQ(first->parameter, "threads");
  EXPECT_EQ(first->ran, 1);
  EXPECT_NE(first->asked, 1);
  const auto h = run([](const json& asked, const json& running) {
    json s = running;
    s["threads"] = asked["threads"];
    return s;
  });
  const auto ignored = FirstIgnoredChange(Dims(), h);
  ASSERT_TRUE(ignored);
  EXPECT_GT(ignored->epoch, 1u) << "threads were applied";
  EXPECT_EQ(ignored->parameter, "batch_size");
  EXPECT_EQ(h[ignored->epoch].setting["batch_size"], 128);
  std::vector<EpochSpeed> before(h.begin(), h.begin() + static_cast<long>(ignored->epoch));
  EXPECT_NE(NextSetting(Dims(), before, before.back().setting).setting["batch_size"], 128)
      << "the epoch it names was asked for another batch size";
}

// The spec's `mutable` and the worker's declaration together: a parameter
// is probed within a trial only where both say it may change mid-trial;
// one the worker does not declare at all is unknown to its program and is
// named; no declaration leaves the spec's word as it was.
TEST(CoTuner, OnlyParametersBothSpecAndWorkerLetChangeAreProbed) {
  std::vector<SystemDimension> dims = {
      {"threads", {1, 2, 4}, true},
      {"inter_op_threads", {1, 2}, true},  // the spec says mutable: true
      {"batch_size", {64, 128}, true},
      {"prefetch", {1, 2}, false},  // the spec says mutable: false
      {"foo", {1, 2}, true}};
  const std::map<std::string, SystemChange> declared = {
      {"threads", SystemChange::kMidTrial},
      {"inter_op_threads", SystemChange::kAtRestart},
      {"batch_size", SystemChange::kFixed},
      {"prefetch", SystemChange::kMidTrial}};
  std::vector<SystemDimension> none = dims;
  EXPECT_TRUE(RestrictToDeclared(none, {}).empty());
  for (size_t i = 0; i < dims.size(); ++i)
    EXPECT_EQ(none[i].may_change_mid_trial, dims[i].may_change_mid_trial);

  EXPECT_EQ(RestrictToDeclared(dims, declared), std::vector<std::string>{"foo"});
  std::map<std::string, bool> probed;
  for (const auto& d : dims) probed[d.name] = d.may_change_mid_trial;
  EXPECT_EQ(probed, (std::map<std::string, bool>{{"threads", true},
                                                 {"inter_op_threads", false},
                                                 {"batch_size", false},
                                                 {"prefetch", false},
                                                 {"foo", false}}));
  // And NextSetting then probes threads only, whatever the speeds.
  std::vector<EpochSpeed> h;
  json s = {
      {"threads", 2}, {"inter_op_threads", 1}, {"batch_size", 64}, {"prefetch", 1}, {"foo", 1}};
  for (int epoch = 0; epoch < 8; ++epoch) {
    h.push_back({s, 1000.0 + epoch});
    const json next = NextSetting(dims, h, s).setting;
    for (const char* fixed : {"inter_op_threads", "batch_size", "prefetch", "foo"}) {
      EXPECT_EQ(next[fixed], s[fixed]) << fixed << " was probed at epoch " << epoch;
    }
    s = next;
  }
  EXPECT_FALSE(FirstIgnoredChange(dims, h))
      << "a fixed parameter's value is never expected to change";
}

// A range beyond the device: values above its limit are dropped, a start
// above it comes down to the largest value left, and a range wholly above
// it runs at the limit.
TEST(CoTuner, CapToDeviceNeverAsksForMoreThanTheDeviceTakes) {
  SystemDimension threads{"threads", {1, 2, 4, 8}, true};
  json start = {{"threads", 8}, {"batch_size", 64}};
  EXPECT_TRUE(CapToDevice(threads, 2, &start));
  EXPECT_EQ(threads.values, (std::vector<json>{1, 2}));
  EXPECT_EQ(start, json({{"threads", 2}, {"batch_size", 64}}));
  std::vector<EpochSpeed> h;
  for (int epoch = 0; epoch < 6; ++epoch) {
    h.push_back({start, 1000.0 * (epoch + 1)});
    start = NextSetting({threads}, h, start).setting;
    EXPECT_LE(start["threads"].get<int>(), 2) << "epoch " << epoch;
  }

  SystemDimension within{"threads", {1, 2}, true};
  json fits = {{"threads", 2}};
  EXPECT_FALSE(CapToDevice(within, 4, &fits)) << "nothing to cap";
  EXPECT_EQ(within.values, (std::vector<json>{1, 2}));

  SystemDimension beyond{"threads", {4, 8}, true};
  json high = {{"threads", 4}};
  EXPECT_TRUE(CapToDevice(beyond, 2, &high));
  EXPECT_EQ(beyond.values, (std::vector<json>{2}));
  EXPECT_EQ(high["threads"].dump(), "2") << "an int, as the parameter's own values are";
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

// Reuse: what earlier trials measured (KnownSpeeds, by the tunable part of
// a setting) spares a trial the probes of neighbours known slower than its
// best so far; a neighbour known faster, or not known, is still probed; a
// drift makes what was known stale, and probing is as without it. A
// program that applied the probes it was asked before anything was known
// is not taken for one that ignores changes.
TEST(CoTuner, NeighboursKnownSlowerAreNotProbedAgain) {
  const auto dims = Dims();
  auto key = [&](int threads, int batch) {
    return TunableKey(dims, {{"threads", threads}, {"batch_size", batch}, {"device", "cpu"}});
  };
  EXPECT_EQ(
      key(2, 256),
      TunableKey(dims, {{"batch_size", 256}, {"threads", 2}, {"device", "cpu"}, {"other", 1}}))
      << "only the co-tuned parameters, in one order";
  // Earlier trials found 2 threads and batch 256 fastest; every neighbour of
  // it is known, and slower by more than 10%.
  KnownSpeeds known;
  for (int t : {1, 2, 4}) {
    for (int b : {64, 128, 256}) known[key(t, b)] = Speed({{"threads", t}, {"batch_size", b}});
  }
  const json best = {{"threads", 2}, {"batch_size", 256}, {"device", "cpu"}};
  std::vector<EpochSpeed> h = {{best, Speed(best)}};
  const auto reused = NextSetting(dims, h, best, {}, known);
  EXPECT_FALSE(reused.probing) << reused.reason;
  EXPECT_EQ(reused.setting, best);
  EXPECT_EQ(reused.reason, "settled (neighbours known slower)");
  const auto alone = NextSetting(dims, h, best);
  EXPECT_TRUE(alone.probing) << "without what was known, the trial probes its neighbours";

  // A neighbour within 10% of the best, or one never measured, is probed.
  KnownSpeeds close = known;
  close[key(4, 256)] = 0.95 * known[key(2, 256)];
  EXPECT_EQ(NextSetting(dims, h, best, {}, close).setting["threads"], 4);
  KnownSpeeds partial = known;
  partial.erase(key(1, 256));
  EXPECT_EQ(NextSetting(dims, h, best, {}, partial).setting["threads"], 1);

  // After a drift the trial probes as if nothing were known.
  std::vector<EpochSpeed> drifted = {{best, 2600}, {best, 2600}, {best, 1200}};
  const auto d = NextSetting(dims, drifted, best, {}, known);
  EXPECT_TRUE(d.probing) << d.reason;
  EXPECT_NE(d.reason.find("drift"), std::string::npos) << d.reason;

  // A trial that probed threads=1 before anything was known, and ran it as
  // asked, did not ignore a change though the model now says it is slower.
  const json one = {{"threads", 1}, {"batch_size", 256}, {"device", "cpu"}};
  std::vector<EpochSpeed> probed = {{best, Speed(best)}, {one, Speed(one)}};
  EXPECT_EQ(NextSetting(dims, {probed.front()}, best).setting, one) << "what it was asked then";
  EXPECT_FALSE(FirstIgnoredChange(dims, probed, {}, 64, known));
  // One that keeps running its setting when a probe nothing rules out is
  // asked is still caught.
  std::vector<EpochSpeed> stuck = {{best, Speed(best)}, {best, Speed(best)}};
  EXPECT_TRUE(FirstIgnoredChange(dims, stuck, {}, 64, partial));
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
