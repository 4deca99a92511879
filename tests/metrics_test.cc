#include "server/metrics/metrics.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace hpo::metrics {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(Metrics, CountersAddAndAreMonotonic) {
  Registry registry;
  Counter& c = registry.counter("hpo_asks_total", "Asks.");
  EXPECT_EQ(c.Value(), 0.0);
  c.Increment();
  c.Increment(2.5);
  EXPECT_EQ(c.Value(), 3.5);
  c.Increment(-1.0);  // ignored: a counter never goes down
  c.Increment(kNaN);  // ignored: would poison the counter for good
  c.Increment(0.0);
  EXPECT_EQ(c.Value(), 3.5);
  EXPECT_EQ(registry.Render(),
            "# HELP hpo_asks_total Asks.\n"
            "# TYPE hpo_asks_total counter\n"
            "hpo_asks_total 3.5\n");
}

TEST(Metrics, GaugesGoUpAndDown) {
  Registry registry;
  Gauge& g = registry.gauge("hpo_leases_held", "Leases.");
  g.Increment();
  g.Increment(4);
  g.Decrement(2);
  EXPECT_EQ(g.Value(), 3.0);
  g.Set(-7.25);
  EXPECT_EQ(g.Value(), -7.25);
  EXPECT_TRUE(Contains(registry.Render(), "\nhpo_leases_held -7.25\n"));
}

TEST(Metrics, SameNameAndLabelsReturnTheSameObject) {
  Registry registry;
  Counter& a = registry.counter("hpo_x_total", "X.", {{"a", "1"}, {"b", "2"}});
  Counter& b = registry.counter("hpo_x_total", "X.", {{"b", "2"}, {"a", "1"}});
  Counter& other = registry.counter("hpo_x_total", "X.", {{"a", "1"}, {"b", "3"}});
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &other);
  EXPECT_EQ(&registry.gauge("hpo_g", "G."), &registry.gauge("hpo_g", "G."));
  Histogram& h = registry.histogram("hpo_h_seconds", "H.", {1, 2}, {{"m", "ask"}});
  EXPECT_EQ(&h, &registry.histogram("hpo_h_seconds", "H.", {1, 2}, {{"m", "ask"}}));
  EXPECT_NE(&h, &registry.histogram("hpo_h_seconds", "H.", {1, 2}, {{"m", "tell"}}));

  a.Increment(2);
  other.Increment();
  // One family, samples sorted by their (name-sorted) labels.
  const std::string text = registry.Render();
  EXPECT_TRUE(Contains(text,
                       "# TYPE hpo_x_total counter\n"
                       "hpo_x_total{a=\"1\",b=\"2\"} 2\n"
                       "hpo_x_total{a=\"1\",b=\"3\"} 1\n"))
      << text;
}

TEST(Metrics, SamplesAreSortedByLabelsWhateverTheRegistrationOrder) {
  // prometheus-cpp keeps a family's metrics in a hash map; Render sorts them
  // so that the page is the same for the same values.
  Registry registry;
  std::string expected = "# HELP hpo_req_total Req.\n# TYPE hpo_req_total counter\n";
  for (int i = 0; i < 20; ++i) {
    const std::string code = std::to_string(100 + i);
    expected += "hpo_req_total{code=\"" + code + "\",method=\"GET\"} 1\n";
  }
  for (int i = 19; i >= 0; --i) {
    const Labels labels = {{"method", "GET"}, {"code", std::to_string(100 + i)}};
    registry.counter("hpo_req_total", "Req.", labels).Increment();
  }
  EXPECT_EQ(registry.Render(), expected);
}

TEST(Metrics, LabelValuesAndHelpAreEscaped) {
  Registry registry;
  registry
      .gauge("hpo_g", "Help with \\ a backslash,\na newline and \"quotes\".",
             {{"path", "C:\\tmp\\\"x\"\nnext"}})
      .Set(1);
  EXPECT_EQ(registry.Render(),
            "# HELP hpo_g Help with \\\\ a backslash,\\na newline and \"quotes\".\n"
            "# TYPE hpo_g gauge\n"
            "hpo_g{path=\"C:\\\\tmp\\\\\\\"x\\\"\\nnext\"} 1\n");
}

TEST(Metrics, HistogramBucketsAreCumulativeWithSumAndCount) {
  Registry registry;
  Histogram& h = registry.histogram("hpo_ask_duration_seconds", "Ask latency.", {1, 2, 5},
                                    {{"method", "ask"}});
  for (const double v : {0.5, 1.0, 1.5, 3.0, 10.0}) h.Observe(v);
  EXPECT_EQ(h.Count(), 5u);
  EXPECT_EQ(h.Sum(), 16.0);
  EXPECT_EQ(registry.Render(),
            "# HELP hpo_ask_duration_seconds Ask latency.\n"
            "# TYPE hpo_ask_duration_seconds histogram\n"
            // prometheus-cpp writes _count and _sum before the buckets.
            "hpo_ask_duration_seconds_count{method=\"ask\"} 5\n"
            "hpo_ask_duration_seconds_sum{method=\"ask\"} 16\n"
            "hpo_ask_duration_seconds_bucket{method=\"ask\",le=\"1\"} 2\n"  // 1 <= le
            "hpo_ask_duration_seconds_bucket{method=\"ask\",le=\"2\"} 3\n"
            "hpo_ask_duration_seconds_bucket{method=\"ask\",le=\"5\"} 4\n"
            "hpo_ask_duration_seconds_bucket{method=\"ask\",le=\"+Inf\"} 5\n");
}

TEST(Metrics, HistogramWithoutLabelsAndSpecialObservations) {
  Registry registry;
  Histogram& h = registry.histogram("hpo_size_bytes", "Sizes.", {0.5});
  h.Observe(kInf);
  h.Observe(-kInf);
  EXPECT_EQ(registry.Render(),
            "# HELP hpo_size_bytes Sizes.\n"
            "# TYPE hpo_size_bytes histogram\n"
            "hpo_size_bytes_count 2\n"
            "hpo_size_bytes_sum Nan\n"  // +Inf + -Inf
            "hpo_size_bytes_bucket{le=\"0.5\"} 1\n"
            "hpo_size_bytes_bucket{le=\"+Inf\"} 2\n");
  // prometheus-cpp on its own would count NaN in the first bucket (its
  // lower_bound finds no bound NaN exceeds); the facade sends it to +Inf.
  Histogram& n = registry.histogram("hpo_nan_seconds", "NaN.", {1});
  n.Observe(kNaN);
  EXPECT_EQ(n.Count(), 1u);
  EXPECT_TRUE(std::isnan(n.Sum()));
  EXPECT_TRUE(Contains(registry.Render(),
                       "hpo_nan_seconds_bucket{le=\"1\"} 0\n"
                       "hpo_nan_seconds_bucket{le=\"+Inf\"} 1\n"));
}

// As prometheus-cpp's TextSerializer spells them; Prometheus reads numbers
// with Go's strconv.ParseFloat, which takes "-0", and "Nan" in any case.
// promtool (below) and the real Prometheus (prometheus_scrape_test.cc) read
// the page.
TEST(Metrics, NumbersAreFormattedAsPrometheusReadsThem) {
  Registry registry;
  const std::vector<std::pair<double, std::string>> cases = {
      {0, "0"},       {-0.0, "-0"},        {1e6, "1000000"},           {-42, "-42"},
      {0.1, "0.1"},   {1.5e-7, "1.5e-07"}, {1e300, "1e+300"},          {kNaN, "Nan"},
      {kInf, "+Inf"}, {-kInf, "-Inf"},     {123456.789, "123456.789"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    registry.gauge("hpo_value", "V.", {{"case", std::to_string(100 + i)}}).Set(cases[i].first);
  }
  const std::string text = registry.Render();
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_TRUE(Contains(
        text, "hpo_value{case=\"" + std::to_string(100 + i) + "\"} " + cases[i].second + "\n"))
        << cases[i].second << " in\n"
        << text;
  }
}

TEST(Metrics, CallbacksAreEvaluatedAtRenderTime) {
  Registry registry;
  int calls = 0;
  double pending = 3;
  registry.gauge_callback("hpo_trials", "Trials by state.", [&] {
    ++calls;
    // Unsorted on purpose: Render sorts the samples.
    return GaugeSamples{{{{"state", "running"}}, 1}, {{{"state", "pending"}}, pending}};
  });
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(registry.Render(),
            "# HELP hpo_trials Trials by state.\n"
            "# TYPE hpo_trials gauge\n"
            "hpo_trials{state=\"pending\"} 3\n"
            "hpo_trials{state=\"running\"} 1\n");
  pending = 0;
  EXPECT_TRUE(Contains(registry.Render(), "hpo_trials{state=\"pending\"} 0\n"));
  EXPECT_EQ(calls, 2);
}

TEST(Metrics, CallbackMayUseTheRegistry) {
  // Callbacks run without the registry's lock: one that registers or updates
  // a metric must not deadlock.
  Registry registry;
  registry.gauge_callback("hpo_workers", "Workers.", [&] {
    registry.counter("hpo_scrapes_total", "Scrapes.").Increment();
    return GaugeSamples{{{}, 2}};
  });
  registry.Render();
  EXPECT_TRUE(Contains(registry.Render(), "\nhpo_scrapes_total 1\n"));
}

TEST(Metrics, FamiliesAreSortedByNameAndEmptyOnesLeftOut) {
  Registry registry;
  registry.gauge("hpo_b", "B.").Set(1);
  registry.counter("hpo_a_total", "A.").Increment();
  registry.gauge_callback("hpo_c", "Nothing yet.", [] { return GaugeSamples{}; });
  registry.gauge("hpo_0", "Zero.");
  EXPECT_EQ(registry.Render(),
            "# HELP hpo_0 Zero.\n# TYPE hpo_0 gauge\nhpo_0 0\n"
            "# HELP hpo_a_total A.\n# TYPE hpo_a_total counter\nhpo_a_total 1\n"
            "# HELP hpo_b B.\n# TYPE hpo_b gauge\nhpo_b 1\n");
}

TEST(Metrics, ConcurrentUpdatesFromFourThreadsAreExact) {
  Registry registry;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 100000;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&registry, t] {
      // Each thread looks the metrics up itself, racing on registration too.
      Counter& c = registry.counter("hpo_ops_total", "Ops.");
      Gauge& g = registry.gauge("hpo_level", "Level.");
      Histogram& h = registry.histogram("hpo_op_seconds", "Op time.", {0.5, 1.5});
      for (int i = 0; i < kPerThread; ++i) {
        c.Increment();
        g.Increment(t % 2 == 0 ? 2 : -1);
        h.Observe(i % 2);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(registry.counter("hpo_ops_total", "Ops.").Value(), kThreads * kPerThread);
  EXPECT_EQ(registry.gauge("hpo_level", "Level.").Value(), (2 - 1) * 2 * kPerThread);
  Histogram& h = registry.histogram("hpo_op_seconds", "Op time.", {0.5, 1.5});
  EXPECT_EQ(h.Count(), static_cast<uint64_t>(kThreads) * kPerThread);
  EXPECT_EQ(h.Sum(), kThreads * kPerThread / 2);
  const std::string text = registry.Render();
  EXPECT_TRUE(Contains(text, "hpo_op_seconds_bucket{le=\"0.5\"} 200000\n")) << text;
  EXPECT_TRUE(Contains(text, "hpo_op_seconds_bucket{le=\"+Inf\"} 400000\n")) << text;
}

TEST(Metrics, ExponentialBuckets) {
  EXPECT_EQ(ExponentialBuckets(0.001, 10, 4), (std::vector<double>{0.001, 0.01, 0.1, 1}));
  EXPECT_EQ(ExponentialBuckets(1, 2, 5), (std::vector<double>{1, 2, 4, 8, 16}));
  Registry registry;
  registry.histogram("hpo_t_seconds", "T.", ExponentialBuckets(0.005, 10, 3));
  EXPECT_TRUE(Contains(registry.Render(), "le=\"0.05\"} 0\nhpo_t_seconds_bucket{le=\"0.5\"}"));
}

TEST(Metrics, ScopedTimerObservesElapsedSeconds) {
  Registry registry;
  Histogram& h = registry.histogram("hpo_step_seconds", "Step.", {0.001, 10});
  {
    ScopedTimer timer(h);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(h.Count(), 1u);
  EXPECT_GE(h.Sum(), 0.020);
  EXPECT_LT(h.Sum(), 10.0);
  EXPECT_TRUE(Contains(registry.Render(),
                       "hpo_step_seconds_bucket{le=\"0.001\"} 0\n"
                       "hpo_step_seconds_bucket{le=\"10\"} 1\n"));
}

TEST(MetricsDeathTest, ProgrammingErrorsAbort) {
  Registry registry;
  registry.counter("hpo_a_total", "A.");
  registry.histogram("hpo_h_seconds", "H.", {1, 2});
  registry.gauge_callback("hpo_cb", "Callback.", [] { return GaugeSamples{}; });
  EXPECT_DEATH(registry.gauge("hpo_a_total", "A."), "already registered as a counter");
  EXPECT_DEATH(registry.counter("hpo_a_total", "Other help."), "help");
  EXPECT_DEATH(registry.histogram("hpo_h_seconds", "H.", {1, 3}), "other buckets");
  EXPECT_DEATH(registry.gauge_callback("hpo_cb", "Callback.", [] { return GaugeSamples{}; }),
               "already registered as a callback gauge");
  EXPECT_DEATH(registry.gauge("hpo_cb", "Callback."), "already registered");
  EXPECT_DEATH(registry.gauge("1hpo", "Bad."), "invalid metric name");
  EXPECT_DEATH(registry.gauge("hpo-dash", "Bad."), "invalid metric name");
  EXPECT_DEATH(registry.gauge("", "Bad."), "invalid metric name");
  EXPECT_DEATH(registry.gauge("__hpo", "Reserved."), "invalid metric name");
  EXPECT_DEATH(registry.gauge("hpo_g", "G.", {{"a:b", "x"}}), "invalid label name");
  EXPECT_DEATH(registry.gauge("hpo_g", "G.", {{"__x", "x"}}), "invalid label name");
  EXPECT_DEATH(registry.gauge("hpo_g", "G.", {{"a", "x"}, {"a", "y"}}), "given twice");
  EXPECT_DEATH(registry.histogram("hpo_l_seconds", "L.", {1}, {{"le", "1"}}), "invalid label name");
  EXPECT_DEATH(registry.histogram("hpo_b_seconds", "B.", {2, 1}), "strictly increasing");
  EXPECT_DEATH(registry.histogram("hpo_b_seconds", "B.", {1, kInf}), "strictly increasing");
  EXPECT_DEATH(ExponentialBuckets(0, 2, 3), "ExponentialBuckets");
  EXPECT_DEATH(ExponentialBuckets(1, 1, 3), "ExponentialBuckets");
  // Valid names with colons and digits are fine.
  registry.gauge("hpo:rule_1", "Recorded.", {{"_a1", "x"}}).Set(1);
}

// What Prometheus itself would say about our /metrics page: promtool parses
// the text and lints it (help present, counters end in _total, base units).
TEST(Metrics, PromtoolAcceptsTheRenderedTextWithoutLintWarnings) {
  constexpr const char* kPromtool = "/usr/bin/promtool";
  ASSERT_EQ(access(kPromtool, X_OK), 0)
      << kPromtool << " is missing; it comes with the Debian package 'prometheus', "
      << "which scripts/setup installs";

  Registry registry;
  registry
      .counter("hpo_ask_requests_total", "Ask requests.\nSecond line with a \\ backslash.",
               {{"experiment", "mnist \"quoted\" C:\\dir\nnewline"}, {"transport", "grpc"}})
      .Increment(3);
  registry
      .counter("hpo_ask_requests_total", "Ask requests.\nSecond line with a \\ backslash.",
               {{"experiment", "cifar"}, {"transport", "http"}})
      .Increment(1e6);
  registry.counter("hpo_trials_finished_total", "Trials finished.").Increment(0.5);
  registry.gauge("hpo_leases_held", "Leases held now.").Set(-3);
  registry.gauge("hpo_best_objective", "Best objective.", {{"experiment", "a"}}).Set(kInf);
  registry.gauge("hpo_best_objective", "Best objective.", {{"experiment", "b"}}).Set(-kInf);
  registry.gauge("hpo_best_objective", "Best objective.", {{"experiment", "c"}}).Set(kNaN);
  registry.gauge("hpo_best_objective", "Best objective.", {{"experiment", "d"}}).Set(1.5e-7);
  Histogram& latency = registry.histogram("hpo_rpc_duration_seconds", "RPC latency.",
                                          ExponentialBuckets(0.001, 10, 4), {{"method", "Ask"}});
  for (const double v : {0.0005, 0.002, 0.5, 7.0, kInf}) latency.Observe(v);
  registry.histogram("hpo_rpc_duration_seconds", "RPC latency.", ExponentialBuckets(0.001, 10, 4),
                     {{"method", "Tell"}});
  { ScopedTimer timer(registry.histogram("hpo_render_duration_seconds", "Render.", {0.1})); }
  registry.gauge_callback("hpo_trials", "Trials by state.", [] {
    return GaugeSamples{{{{"state", "running"}, {"experiment", "x\\y"}}, 2},
                        {{{"state", "pending"}, {"experiment", "x\\y"}}, 5}};
  });
  registry.gauge_callback("hpo_workers", "Connected workers.", [] {
    return GaugeSamples{{{}, 4}};
  });
  const std::string text = registry.Render();

  char path[] = "/tmp/hpo_metrics_test_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0) << "mkstemp failed";
  close(fd);
  {
    std::ofstream file(path, std::ios::binary);
    file << text;
    ASSERT_TRUE(file.good());
  }
  const std::string command = std::string(kPromtool) + " check metrics < " + path + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr) << "popen failed: " << command;
  std::string output;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) output.append(buf, n);
  const int status = pclose(pipe);
  std::remove(path);

  ASSERT_TRUE(WIFEXITED(status)) << "promtool did not exit normally\n" << output;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "promtool output:\n" << output << "\ninput:\n" << text;
  EXPECT_EQ(output, "") << "promtool lint warnings; input:\n" << text;
}

}  // namespace
}  // namespace hpo::metrics
