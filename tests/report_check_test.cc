// The checks every report passes before anything of it is stored
// (server/engine/report_check.h), REST's and gRPC's alike: each bad field
// is refused with an error that names it, and what a program says it
// applied is merged into the setting that is stored.
#include "server/engine/report_check.h"

#include <gtest/gtest.h>

#include <string>

namespace hpo::server {
namespace {

using nlohmann::json;

ExperimentSpec Spec() {
  auto spec = ParseExperimentSpec(std::string(R"({"name": "r",
    "objective": {"metric": "accuracy", "direction": "maximize"},
    "spaces": [{"name": "a", "params": {"x": {"type": "float", "low": 0, "high": 1}}}],
    "budget": {"max_trials": 4, "steps_per_trial": 5},
    "executor": {"client": {}}})"));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

TrialReport Good() {
  TrialReport r;
  r.trial_id = 1;
  r.step = 2;
  r.metrics = {{"accuracy", 0.8}, {"loss", 0.4}};
  r.system = {{"batch_size", 64}, {"threads", 2}};
  return r;
}

// The error of `r`, or "ok".
std::string Error(const TrialReport& r) {
  auto checked = CheckedReport(Spec(), r);
  return checked.ok() ? "ok" : checked.status().message();
}

TEST(ReportCheck, EachBadFieldIsRefusedNamingIt) {
  EXPECT_EQ(Error(Good()), "ok");
  TrialReport r = Good();
  r.step = 6;  // past steps_per_trial
  EXPECT_NE(Error(r).find("step"), std::string::npos) << Error(r);
  r = Good();
  r.metrics.erase("accuracy");
  EXPECT_NE(Error(r).find("metrics.accuracy"), std::string::npos) << Error(r);
  r = Good();
  r.metrics["accuracy"] = "high";
  EXPECT_NE(Error(r).find("metrics.accuracy"), std::string::npos) << Error(r);
  r = Good();
  r.metrics[""] = 1;
  EXPECT_NE(Error(r).find("metric name"), std::string::npos) << Error(r);
  r = Good();
  for (size_t i = 0; i <= kMaxMetricsPerReport; ++i) r.metrics["m" + std::to_string(i)] = 1;
  EXPECT_NE(Error(r).find("more than the limit"), std::string::npos) << Error(r);
  r = Good();
  r.system = json::array();
  EXPECT_NE(Error(r).find("system: must be an object"), std::string::npos) << Error(r);
  r = Good();
  r.applied = {{"threads", std::string(kMaxValueLength + 10, 'x')}};
  EXPECT_NE(Error(r).find("applied.threads"), std::string::npos) << Error(r);
  r = Good();
  r.system_changes[std::string(kMaxNameLength + 1, 'n')] = {};
  EXPECT_NE(Error(r).find("system_changes"), std::string::npos) << Error(r);
}

TEST(ReportCheck, WhatTheProgramAppliedIsStoredAsTheSetting) {
  TrialReport r = Good();
  r.applied = {{"threads", 1}};
  auto checked = CheckedReport(Spec(), r);
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(checked->system, (json{{"batch_size", 64}, {"threads", 1}}));
  r.system = nullptr;
  checked = CheckedReport(Spec(), r);
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(checked->system, (json{{"threads", 1}}));
}

}  // namespace
}  // namespace hpo::server
