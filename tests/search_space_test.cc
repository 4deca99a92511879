#include <gtest/gtest.h>

#include <map>
#include <set>

#include "search/sampler.h"
#include "search/space.h"

namespace hpo::search {
namespace {

using nlohmann::json;

SearchSpace Parse(const char* text) {
  auto r = ParseSearchSpace(json::parse(text), "spaces[0]");
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SearchSpace{};
}

const char* kMixed = R"({"name": "mlp", "params": {
  "lr": {"type": "float", "low": 1e-5, "high": 1e-1, "log": true},
  "dropout": {"type": "float", "low": 0.0, "high": 0.5, "step": 0.1},
  "width": {"type": "int", "low": 16, "high": 1024, "log": true},
  "layers": {"type": "int", "low": 1, "high": 9, "step": 2},
  "optimizer": {"type": "categorical", "choices": ["sgd", "adam"],
    "conditional": {
      "sgd": {"momentum": {"type": "float", "low": 0.0, "high": 0.99},
              "nesterov": {"type": "categorical", "choices": [true, false],
                           "conditional": {"true": {"dampening": {"type": "float", "low": 0, "high": 0.1}}}}},
      "adam": {"beta1": {"type": "float", "low": 0.8, "high": 0.999}}}}}})";

TEST(SearchSpace, ParsesAllKindsAndPutsParentsFirst) {
  auto s = Parse(kMixed);
  ASSERT_EQ(s.size(), 9);
  for (int i = 0; i < s.size(); ++i) EXPECT_LT(s.params[i].parent, i) << s.params[i].name;
  const Param& d = s.params[s.Find("dampening")];
  EXPECT_EQ(s.params[d.parent].name, "nesterov");
  EXPECT_EQ(s.params[s.Find("momentum")].parent, s.Find("optimizer"));
  EXPECT_EQ(s.params[s.Find("width")].step, 1);
  EXPECT_TRUE(s.params[s.Find("lr")].log);
}

TEST(SearchSpace, ErrorsNameThePath) {
  struct Case {
    const char* spec;
    const char* path;
  } cases[] = {
      {R"({"name":"a","params":{"lr":{"type":"float","low":1,"high":0}}})", "spaces[0].params.lr.low: must be < high"},
      {R"({"name":"a","params":{"lr":{"type":"float","low":0,"high":1,"log":true}}})", "spaces[0].params.lr.low: must be > 0"},
      {R"({"name":"a","params":{"lr":{"type":"floaty","low":0,"high":1}}})", "spaces[0].params.lr.type"},
      {R"({"name":"a","params":{"lr":{"type":"float","low":0,"hi":1}}})", "spaces[0].params.lr.hi: unknown field"},
      {R"({"name":"a","params":{"n":{"type":"int","low":0.5,"high":3}}})", "spaces[0].params.n.low"},
      {R"({"name":"a","params":{"o":{"type":"categorical","choices":[]}}})", "spaces[0].params.o.choices"},
      {R"({"name":"a","params":{"o":{"type":"categorical","choices":["x","x"]}}})", "spaces[0].params.o.choices[1]"},
      {R"({"name":"a","params":{"o":{"type":"categorical","choices":["x"],"conditional":{"y":{}}}}})", "spaces[0].params.o.conditional.y: not one of the choices"},
      {R"({"name":"a","params":{"o":{"type":"categorical","choices":["x"],"conditional":{"x":{"o":[1,2]}}}}})", "already used"},
      {R"({"name":"","params":{"x":[1]}})", "spaces[0].name"},
      {R"({"name":"a","params":{}})", "spaces[0].params: must not be empty"},
  };
  for (const auto& c : cases) {
    auto r = ParseSearchSpace(json::parse(c.spec), "spaces[0]");
    ASSERT_FALSE(r.ok()) << c.spec;
    EXPECT_TRUE(r.status().IsInvalidArgument());
    EXPECT_NE(r.status().message().find(c.path), std::string::npos) << r.status() << " for " << c.spec;
  }
  auto dup = ParseSearchSpaces(json::parse(R"([{"name":"a","params":{"x":[1]}},{"name":"a","params":{"y":[1]}}])"));
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("spaces[1].name"), std::string::npos) << dup.status();
}

TEST(SearchSpace, UniformSamplesRespectBoundsStepsLogAndConditions) {
  auto s = Parse(kMixed);
  Rng rng(7);
  std::map<std::string, int> active;
  std::set<double> dropouts, layers;
  int lr_low_decade = 0;
  for (int n = 0; n < 4000; ++n) {
    Assignment a = SampleUniform(s, rng);
    ASSERT_TRUE(s.Validate(a).ok()) << s.Validate(a) << " " << s.ToJson(a).dump();
    for (int i = 0; i < s.size(); ++i) active[s.params[i].name] += !IsInactive(a[i]);
    dropouts.insert(a[s.Find("dropout")]);
    layers.insert(a[s.Find("layers")]);
    lr_low_decade += a[s.Find("lr")] < 1e-4;
    const bool sgd = a[s.Find("optimizer")] == 0;
    EXPECT_EQ(!IsInactive(a[s.Find("momentum")]), sgd);
    EXPECT_EQ(!IsInactive(a[s.Find("beta1")]), !sgd);
    // Round trip through the JSON form.
    auto back = s.FromJson(s.ToJson(a));
    ASSERT_TRUE(back.ok()) << back.status();
    for (int i = 0; i < s.size(); ++i) {
      if (IsInactive(a[i])) {
        EXPECT_TRUE(IsInactive((*back)[i]));
      } else {
        EXPECT_DOUBLE_EQ((*back)[i], a[i]);
      }
    }
  }
  EXPECT_EQ(dropouts, (std::set<double>{0, 0.1, 0.2, 0.30000000000000004, 0.4, 0.5}));
  EXPECT_EQ(layers, (std::set<double>{1, 3, 5, 7, 9}));
  // Log-uniform: each of the 4 decades gets about a quarter.
  EXPECT_NEAR(lr_low_decade / 4000.0, 0.25, 0.04);
  EXPECT_NEAR(active["momentum"] / 4000.0, 0.5, 0.05);
  EXPECT_NEAR(active["dampening"] / 4000.0, 0.25, 0.04);
}

TEST(SearchSpace, StepGridIncludesBothEndsAndSnapClamps) {
  Param p;
  p.kind = ParamKind::kFloat;
  p.low = 0;
  p.high = 1;
  p.step = 0.25;
  EXPECT_DOUBLE_EQ(p.FromUnit(0), 0);
  EXPECT_DOUBLE_EQ(p.FromUnit(1), 1);
  EXPECT_DOUBLE_EQ(p.Snap(0.3), 0.25);
  EXPECT_DOUBLE_EQ(p.Snap(7), 1);
  EXPECT_TRUE(p.Contains(0.75));
  EXPECT_FALSE(p.Contains(0.7));
  EXPECT_EQ(p.Cardinality(), 5);
  EXPECT_NEAR(p.ToUnit(p.FromUnit(0.5)), 0.5, 1e-12);
}

TEST(SearchSpace, FromJsonRejectsWhatDoesNotFit) {
  auto s = Parse(kMixed);
  json ok = {{"lr", 0.01}, {"dropout", 0.2}, {"width", 64}, {"layers", 3}, {"optimizer", "adam"}, {"beta1", 0.9}};
  ASSERT_TRUE(s.FromJson(ok).ok()) << s.FromJson(ok).status();
  auto expect_error = [&](json j, const std::string& what) {
    auto r = s.FromJson(j);
    ASSERT_FALSE(r.ok()) << j.dump();
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status();
  };
  json bad = ok;
  bad["lr"] = 2.0;
  expect_error(bad, "params.lr: 2.0 is outside");
  bad = ok;
  bad["layers"] = 4;
  expect_error(bad, "params.layers: 4 is not on the step grid");
  bad = ok;
  bad["momentum"] = 0.9;
  expect_error(bad, "params.momentum: given although its condition does not hold");
  bad = ok;
  bad.erase("beta1");
  expect_error(bad, "params.beta1: missing");
  bad = ok;
  bad["optimizer"] = "rmsprop";
  expect_error(bad, "params.optimizer: \"rmsprop\" is not one of the choices");
  bad = ok;
  bad["color"] = "red";
  expect_error(bad, "params.color: not a parameter");
}

TEST(SearchSpace, ComplexityCountsConditionalSubtrees) {
  auto flat = Parse(R"({"name":"a","params":{"x":[1,2,3,4],"y":{"type":"int","low":1,"high":8}}})");
  EXPECT_DOUBLE_EQ(flat.ComplexityBits(), 5);  // 4 * 8 = 32
  auto cond = Parse(R"({"name":"a","params":{"o":{"type":"categorical","choices":["a","b"],
      "conditional":{"a":{"x":{"type":"int","low":1,"high":4}}}}}})");
  EXPECT_DOUBLE_EQ(cond.ComplexityBits(), std::log2(5.0));  // a x 4 values + b
  auto cont = Parse(R"({"name":"a","params":{"x":{"type":"float","low":0,"high":1}}})");
  EXPECT_DOUBLE_EQ(cont.ComplexityBits(10), 10);
}

TEST(SearchSpace, SamplingIsDeterministicBySeed) {
  auto s = Parse(kMixed);
  Rng a(42), b(42), c(43);
  for (int i = 0; i < 50; ++i) {
    auto x = SampleUniform(s, a);
    auto y = SampleUniform(s, b);
    EXPECT_EQ(s.ToJson(x), s.ToJson(y));
  }
  EXPECT_NE(s.ToJson(SampleUniform(s, a)), s.ToJson(SampleUniform(s, c)));
}

}  // namespace
}  // namespace hpo::search
