#include <gtest/gtest.h>

#include <limits>
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
      {R"({"name":"a","params":{"lr":{"type":"float","low":1,"high":0}}})",
       "spaces[0].params.lr.low: must be < high"},
      {R"({"name":"a","params":{"lr":{"type":"float","low":0,"high":1,"log":true}}})",
       "spaces[0].params.lr.low: must be > 0"},
      {R"({"name":"a","params":{"lr":{"type":"floaty","low":0,"high":1}}})",
       "spaces[0].params.lr.type"},
      {R"({"name":"a","params":{"lr":{"type":"float","low":0,"hi":1}}})",
       "spaces[0].params.lr.hi: unknown field"},
      {R"({"name":"a","params":{"n":{"type":"int","low":0.5,"high":3}}})",
       "spaces[0].params.n.low"},
      {R"({"name":"a","params":{"o":{"type":"categorical","choices":[]}}})",
       "spaces[0].params.o.choices"},
      {R"({"name":"a","params":{"o":{"type":"categorical","choices":["x","x"]}}})",
       "spaces[0].params.o.choices[1]"},
      {R"({"name":"a","params":{"o":{"type":"categorical","choices":["x"],"conditional":{"y":{}}}}})",
       "spaces[0].params.o.conditional.y: not one of the choices"},
      {R"({"name":"a","params":{"o":{"type":"categorical","choices":["x"],"conditional":{"x":{"o":[1,2]}}}}})",
       "already used"},
      {R"({"name":"","params":{"x":[1]}})", "spaces[0].name"},
      {R"({"name":"a","params":{}})", "spaces[0].params: must not be empty"},
  };
  for (const auto& c : cases) {
    auto r = ParseSearchSpace(json::parse(c.spec), "spaces[0]");
    ASSERT_FALSE(r.ok()) << c.spec;
    EXPECT_TRUE(r.status().IsInvalidArgument());
    EXPECT_NE(r.status().message().find(c.path), std::string::npos)
        << r.status() << " for " << c.spec;
  }
  auto dup = ParseSearchSpaces(
      json::parse(R"([{"name":"a","params":{"x":[1]}},{"name":"a","params":{"y":[1]}}])"));
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
  json ok = {{"lr", 0.01},  {"dropout", 0.2},      {"width", 64},
             {"layers", 3}, {"optimizer", "adam"}, {"beta1", 0.9}};
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

// Domains whose suggestions a double cannot represent
// are refused when parsed, naming the field. They used to be taken, and the
// float-to-int conversions then overflowed: an int in [-(2^63-1), 2^63-1]
// was suggested -2^63, and a float in [0, 1e308] with step 1e-300 gave
// -9.2e-282.
TEST(SearchSpace, RefusesDomainsDoublesCannotRepresent) {
  struct Case {
    const char* params;
    const char* error;
  } cases[] = {
      {R"("i": {"type": "int", "low": -9223372036854775807, "high": 9223372036854775807})",
       "spaces[0].params.i.low: an int parameter's bounds must be within -2^53..2^53 "
       "(9007199254740992)"},
      {R"("i": {"type": "int", "low": 0, "high": 9007199254740993})",
       "spaces[0].params.i.high: an int parameter's bounds must be within -2^53..2^53"},
      {R"("i": {"type": "int", "low": -1e16, "high": 0})",
       "spaces[0].params.i.low: an int parameter's bounds"},
      {R"("i": {"type": "int", "low": 0, "high": 18446744073709551615})",
       "spaces[0].params.i.high: an int"},
      {R"("f": {"type": "float", "low": 0, "high": 1e308, "step": 1e-300})",
       "spaces[0].params.f.step: (high - low) / step must be at most 2^53 (9007199254740992) grid "
       "points"},
      {R"("f": {"type": "float", "low": 0, "high": 1, "step": 1e-16})",
       "spaces[0].params.f.step: (high - low)"},
      {R"("f": {"type": "float", "low": -1e308, "high": 1e308})",
       "spaces[0].params.f.high: high - low must be a finite number"},
  };
  for (const auto& c : cases) {
    auto r = ParseSearchSpace(
        json::parse(std::string(R"({"name": "s", "params": {)") + c.params + "}}"), "spaces[0]");
    ASSERT_FALSE(r.ok()) << c.params;
    EXPECT_TRUE(r.status().IsInvalidArgument());
    EXPECT_EQ(r.status().message().rfind(c.error, 0), 0u)
        << r.status() << "\nexpected: " << c.error;
  }
}

// At the edges of what is accepted, every suggestion is inside the bounds,
// on the grid, and its JSON form is the number itself.
TEST(SearchSpace, SuggestionsAtTheEdgesOfTheAcceptedDomainsStayInside) {
  auto s = Parse(R"({"name": "s", "params": {
      "i": {"type": "int", "low": -9007199254740992, "high": 9007199254740992},
      "j": {"type": "int", "low": -9007199254740992, "high": 9007199254740992, "step": 3},
      "f": {"type": "float", "low": -1e307, "high": 1e307},
      "g": {"type": "float", "low": 0, "high": 1e300, "step": 1.2e284}}})");
  ASSERT_EQ(s.size(), 4);
  Rng rng(5);
  for (int n = 0; n < 2000; ++n) {
    Assignment a = SampleUniform(s, rng);
    if (n < 2) {  // both ends of every domain
      for (int i = 0; i < s.size(); ++i) a[i] = s.params[i].FromUnit(n);
    }
    ASSERT_TRUE(s.Validate(a).ok()) << s.Validate(a) << " " << s.ToJson(a).dump();
    const json j = s.ToJson(a);
    for (const char* name : {"i", "j"}) {
      ASSERT_TRUE(j[name].is_number_integer()) << j.dump();
      EXPECT_GE(j[name].get<int64_t>(), -(int64_t{1} << 53)) << j.dump();
      EXPECT_LE(j[name].get<int64_t>(), int64_t{1} << 53) << j.dump();
      EXPECT_EQ(static_cast<double>(j[name].get<int64_t>()), a[s.Find(name)]);
    }
    EXPECT_GE(j["g"].get<double>(), 0) << j.dump();
    EXPECT_LE(j["g"].get<double>(), 1e300) << j.dump();
    auto back = s.FromJson(j);
    ASSERT_TRUE(back.ok()) << back.status() << " " << j.dump();
  }
  // An integer just beyond 2^53 would round onto the bound as a double.
  auto beyond = s.FromJson({{"i", 9007199254740993}, {"j", 0}, {"f", 0}, {"g", 0}});
  ASSERT_FALSE(beyond.ok());
  EXPECT_NE(beyond.status().message().find("params.i: 9007199254740993 is outside"),
            std::string::npos)
      << beyond.status();
}

// Converting a double to an integer is defined for every double in search/:
// a parameter built in code beyond what parsing takes saturates instead.
TEST(SearchSpace, ConversionsToIntegersSaturate) {
  const Param huge = Param::Int("i", -9.3e18, 9.3e18);
  EXPECT_EQ(huge.ToJson(1e300), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(huge.ToJson(-1e300), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(huge.ToJson(kInactive), 0);
  EXPECT_EQ(huge.Cardinality(), static_cast<double>(std::numeric_limits<int64_t>::max()));
  const double snapped = huge.FromUnit(0.25);
  EXPECT_GE(snapped, huge.low);
  EXPECT_LE(snapped, huge.high);
  const Param choice = Param::Categorical("c", {"a", "b"});
  EXPECT_EQ(choice.ToJson(7), "b");
  EXPECT_EQ(choice.ToJson(-3), "a");
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
