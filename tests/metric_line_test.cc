#include "worker/metric_line.h"

#include <gtest/gtest.h>

#include <string>

namespace hpo::worker {
namespace {

MetricLine MustParse(const std::string& line,
                     const std::set<std::string, std::less<>>& system_keys = {}) {
  auto r = ParseMetricLine(line, system_keys);
  EXPECT_TRUE(r.ok()) << line << ": " << r.status();
  if (!r.ok() || !r->has_value()) {
    ADD_FAILURE() << "not a metric line: " << line;
    return {};
  }
  return **r;
}

TEST(MetricLine, PrefixedForm) {
  MetricLine m =
      MustParse("hpo: step=3 accuracy=0.91 loss=0.2 samples_per_sec=1200 batch_size=128");
  ASSERT_TRUE(m.step.has_value());
  EXPECT_EQ(*m.step, 3);
  EXPECT_EQ(m.metrics, (std::map<std::string, double>{{"accuracy", 0.91}, {"loss", 0.2}}));
  ASSERT_TRUE(m.samples_per_sec.has_value());
  EXPECT_DOUBLE_EQ(*m.samples_per_sec, 1200);
  EXPECT_EQ(m.system, (nlohmann::json{{"batch_size", 128}}));
}

TEST(MetricLine, PrefixedFormDetails) {
  // No step, leading blanks, tabs, a '\r' from a Windows program, exponents.
  MetricLine m = MustParse("  hpo:\tloss=1e-3   val/acc=+0.5\r");
  EXPECT_FALSE(m.step.has_value());
  EXPECT_FALSE(m.samples_per_sec.has_value());
  EXPECT_EQ(m.metrics, (std::map<std::string, double>{{"loss", 1e-3}, {"val/acc", 0.5}}));
  EXPECT_TRUE(m.system.empty());

  m = MustParse("hpo:step=0 loss=-2 threads=4 inter_op_threads=2 device=cuda:1");
  EXPECT_EQ(*m.step, 0);
  EXPECT_EQ(m.system,
            (nlohmann::json{{"threads", 4}, {"inter_op_threads", 2}, {"device", "cuda:1"}}));
}

TEST(MetricLine, TheTrialsOwnSystemKeys) {
  MetricLine m = MustParse("hpo: step=1 loss=0.5 prefetch=4 precision=bf16 ratio=0.5",
                           {"prefetch", "precision", "ratio"});
  EXPECT_EQ(m.metrics, (std::map<std::string, double>{{"loss", 0.5}}));
  EXPECT_EQ(m.system, (nlohmann::json{{"prefetch", 4}, {"precision", "bf16"}, {"ratio", 0.5}}));
}

TEST(MetricLine, JsonForm) {
  MetricLine m =
      MustParse(R"({"step": 3, "accuracy": 0.91, "samples_per_sec": 1200, "batch_size": 128,)"
                R"( "time": "12:00:01", "msg": "epoch done", "extra": {"a": 1}, "ok": true})");
  EXPECT_EQ(*m.step, 3);
  EXPECT_EQ(m.metrics, (std::map<std::string, double>{{"accuracy", 0.91}}))
      << "fields that are not numbers are a logger's own and skipped";
  EXPECT_DOUBLE_EQ(*m.samples_per_sec, 1200);
  EXPECT_EQ(m.system, (nlohmann::json{{"batch_size", 128}}));

  m = MustParse(R"(  {"step": 2.0, "loss": 1, "device": "cpu"}  )");
  EXPECT_EQ(*m.step, 2);
  EXPECT_EQ(m.metrics, (std::map<std::string, double>{{"loss", 1.0}}));
  EXPECT_EQ(m.system, (nlohmann::json{{"device", "cpu"}}));
}

TEST(MetricLine, OrdinaryOutputIsNotAMetricLine) {
  for (const std::string line : {
           "",
           "   ",
           "Epoch 3/10 loss=0.2",
           "step=3 loss=0.2",
           "HPO: step=1 loss=2",
           "# hpo: step=1 loss=2",
           R"({"loss": 0.2})",
           R"({"epoch": 3, "loss": 0.2})",
           "{not json at all}",
           "[1, 2, 3]",
           R"("step")",
           "{",
           "{\"step\": 1",
       }) {
    auto r = ParseMetricLine(line);
    ASSERT_TRUE(r.ok()) << line << ": " << r.status();
    EXPECT_FALSE(r->has_value()) << line;
  }
}

TEST(MetricLine, MalformedLinesAreErrors) {
  const std::string long_key(kMaxMetricKeyLength + 1, 'k');
  const std::string ok_key(kMaxMetricKeyLength, 'k');
  struct Case {
    std::string line;
    std::string error;  // part of the message
  } cases[] = {
      {"hpo: step=x loss=1", "step: 'x' is not a non-negative integer"},
      {"hpo: step=-1 loss=1", "step"},
      {"hpo: step=1.5 loss=1", "step"},
      {"hpo: step=1 loss=high", "loss: 'high' is not a finite number"},
      {"hpo: loss=nan", "loss: 'nan'"},
      {"hpo: loss=inf", "loss: 'inf'"},
      {"hpo: loss=1e999", "loss: '1e999'"},
      {"hpo: loss=0.5.1", "loss"},
      {"hpo: loss", "expected key=value, got 'loss'"},
      {"hpo: loss=", "expected key=value"},
      {"hpo: =1", "a key is empty"},
      {"hpo: lo$s=1", "only letters, digits"},
      {"hpo: loss=1 loss=2", "loss: given twice"},
      {"hpo: step=1", "no metrics"},
      {"hpo:", "no metrics"},
      {"hpo: loss=1 samples_per_sec=-5", "samples_per_sec"},
      {"hpo: loss=1 batch_size=0", "batch_size: '0' is not a positive integer"},
      {"hpo: loss=1 threads=two", "threads"},
      {"hpo: " + long_key + "=1", "longer than 128"},
      {R"({"step": "3", "loss": 1})", "step"},
      {R"({"step": -1, "loss": 1})", "step"},
      {R"({"step": 1, "loss": 1e999})", "not valid JSON"},
      {R"({"step": 1, "loss": NaN})", "not valid JSON"},
      {R"({"step": 1, "loss": Infinity, "samples_per_sec": 5})", "not valid JSON"},
      {R"({"step": 1})", "no metrics"},
      {R"({"step": 1, "device": 0, "loss": 1})", "device"},
      {R"({"step": 1, "samples_per_sec": "fast", "loss": 1})", "samples_per_sec"},
      {R"({"step": 1, ")" + long_key + R"(": 1})", "longer than 128"},
  };
  for (const auto& c : cases) {
    auto r = ParseMetricLine(c.line);
    ASSERT_FALSE(r.ok()) << c.line;
    EXPECT_TRUE(r.status().IsInvalidArgument()) << c.line;
    EXPECT_NE(r.status().message().find(c.error), std::string::npos)
        << c.line << " -> " << r.status();
  }
  EXPECT_TRUE(ParseMetricLine("hpo: " + ok_key + "=1").ok());
}

TEST(MetricLine, AtMost64Metrics) {
  std::string line = "hpo: step=1";
  std::string json = R"({"step": 1)";
  for (size_t i = 0; i < kMaxMetricsPerLine; ++i) {
    line += " m" + std::to_string(i) + "=1";
    json += R"(, "m)" + std::to_string(i) + R"(": 1)";
  }
  EXPECT_EQ(MustParse(line).metrics.size(), kMaxMetricsPerLine);
  EXPECT_EQ(MustParse(json + "}").metrics.size(), kMaxMetricsPerLine);
  auto r = ParseMetricLine(line + " one_more=1");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than 64 metrics"), std::string::npos) << r.status();
  r = ParseMetricLine(json + R"(, "one_more": 1})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than 64 metrics"), std::string::npos) << r.status();
}

TEST(MetricLine, ErrorsQuoteAtMostAShortPiece) {
  const std::string value(10000, '9');
  auto r = ParseMetricLine("hpo: step=" + value + "x loss=1");
  ASSERT_FALSE(r.ok());
  EXPECT_LT(r.status().message().size(), 200u) << r.status();
}

}  // namespace
}  // namespace hpo::worker
