#include "server/spec/spec.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <set>
#include <utility>

#include "common/utf8.h"
#include "scheduler/policy.h"
#include "search/pruner.h"
#include "search/registry.h"

namespace hpo::server {
namespace {

// Whether early-stopping rule `name` has rungs (search/registry.h).
bool HasRungs(std::string_view name) {
  const auto rule = search::FindStoppingRule(name);
  return rule.ok() && (*rule)->rungs;
}

using nlohmann::json;

std::string NestedTooDeep(const std::string& where) {
  return where + ": nested more than " + std::to_string(kMaxSpecDepth) + " levels deep";
}

// `budget` counts the nodes and the bytes of keys and scalars still
// allowed: YAML aliases share nodes, and expanding a few lines of nested
// aliases would otherwise build gigabytes (a value count alone still let
// 100,000 aliases of one 16 KiB string through: 1.6 GB).
// `depth` counts the mappings and lists open around `node`: yaml-cpp bounds
// the nesting it parses, but not what aliases build (`b: &b [*a]`, then
// `c: &c [*b]`, ... nests one level a line), which only the budget would
// stop, some 450 levels down.
struct ExpansionBudget {
  size_t values = kMaxSpecNodes;
  size_t bytes = kMaxSpecExpandedBytes;
  Status Take(size_t n_bytes) {
    if (values == 0) {
      return Status::InvalidArgument("spec: more than " + std::to_string(kMaxSpecNodes) +
                                     " values (after expanding YAML aliases)");
    }
    if (n_bytes > bytes) {
      return Status::InvalidArgument("spec: more than " + std::to_string(kMaxSpecExpandedBytes) +
                                     " bytes of names and values (after expanding YAML aliases)");
    }
    --values;
    bytes -= n_bytes;
    return Status::OK();
  }
};

Result<json> Convert(const YAML::Node& node, ExpansionBudget& budget, int depth) {
  HPO_RETURN_IF_ERROR(budget.Take(node.IsScalar() ? node.Scalar().size() : 0));
  if ((node.IsSequence() || node.IsMap()) && depth >= kMaxSpecDepth) {
    return Status::InvalidArgument(NestedTooDeep("line " + std::to_string(node.Mark().line + 1)));
  }
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return json(nullptr);
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) {
        HPO_ASSIGN_OR_RETURN(json v, Convert(item, budget, depth + 1));
        out.push_back(std::move(v));
      }
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) {
        if (!kv.first.IsScalar()) {
          return Status::InvalidArgument("line " + std::to_string(kv.first.Mark().line + 1) +
                                         ": mapping keys must be plain strings");
        }
        HPO_RETURN_IF_ERROR(budget.Take(kv.first.Scalar().size()));
        HPO_ASSIGN_OR_RETURN(json v, Convert(kv.second, budget, depth + 1));
        out[kv.first.Scalar()] = std::move(v);
      }
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      if (node.Tag() == "!") return json(s);  // quoted: always a string
      if (s == "~" || s == "null" || s == "Null" || s == "NULL") return json(nullptr);
      if (s == "true" || s == "True" || s == "TRUE") return json(true);
      if (s == "false" || s == "False" || s == "FALSE") return json(false);
      // Numbers as JSON reads them; YAML's 1e-4 (no dot) too.
      if (!s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-' ||
                         s[0] == '+' || s[0] == '.')) {
        const std::string t = s[0] == '+' ? s.substr(1) : s;
        auto parsed = json::parse(t, nullptr, false);
        if (!parsed.is_discarded() && parsed.is_number()) return parsed;
        char* end = nullptr;
        const double d = std::strtod(t.c_str(), &end);
        if (end && *end == '\0' && std::isfinite(d)) return json(d);
      }
      return json(s);
    }
  }
  return json(nullptr);
}

// Every key and string of the spec: valid UTF-8 (it is stored and served as
// JSON) and within the length limits; checked first, so later messages may
// quote any of them.
// `depth` counts the mappings and lists around `j`, so a mapping or list at
// depth kMaxSpecDepth is one level too many: the count json_limits.h keeps.
Status CheckStrings(const json& j, const std::string& path, int depth) {
  const std::string where = path.empty() ? "spec" : path;
  if (j.is_structured() && depth >= kMaxSpecDepth)
    return Status::InvalidArgument(NestedTooDeep(where));
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (!IsValidUtf8(s)) return Status::InvalidArgument(where + ": not valid UTF-8");
    if (s.size() > kMaxSpecStringLength) {
      return Status::InvalidArgument(where + ": longer than " +
                                     std::to_string(kMaxSpecStringLength) + " bytes");
    }
  } else if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!IsValidUtf8(it.key()))
        return Status::InvalidArgument(where + ": a key is not valid UTF-8");
      if (it.key().size() > kMaxSpecNameLength) {
        return Status::InvalidArgument(where + ": key '" + it.key().substr(0, 40) +
                                       "...' is longer than " + std::to_string(kMaxSpecNameLength) +
                                       " bytes");
      }
      HPO_RETURN_IF_ERROR(
          CheckStrings(*it, path.empty() ? it.key() : path + "." + it.key(), depth + 1));
    }
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) {
      HPO_RETURN_IF_ERROR(CheckStrings(j[i], where + "[" + std::to_string(i) + "]", depth + 1));
    }
  }
  return Status::OK();
}

// Reads fields of one object, remembering which were used so unknown ones
// can be reported with their path.
class Fields {
 public:
  Fields(const json& j, std::string path) : j_(j), path_(std::move(path)) {}

  Status RequireObject() const {
    return j_.is_object() ? Status::OK() : Status::InvalidArgument(path_ + ": must be a mapping");
  }
  std::string Path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  const json* Get(const std::string& key) {
    used_.insert(key);
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  Result<std::string> String(const std::string& key, std::optional<std::string> fallback) {
    const json* v = Get(key);
    if (!v) {
      if (fallback) return *fallback;
      return Status::InvalidArgument(Path(key) + ": missing");
    }
    if (!v->is_string() || v->get<std::string>().empty()) {
      return Status::InvalidArgument(Path(key) + ": must be a non-empty string");
    }
    if (v->get_ref<const std::string&>().size() > kMaxSpecNameLength) {
      return Status::InvalidArgument(Path(key) + ": longer than " +
                                     std::to_string(kMaxSpecNameLength) + " bytes");
    }
    return v->get<std::string>();
  }
  Result<int64_t> Int(const std::string& key, std::optional<int64_t> fallback, int64_t min,
                      int64_t max = INT64_MAX) {
    const json* v = Get(key);
    if (!v) {
      if (fallback) return *fallback;
      return Status::InvalidArgument(Path(key) + ": missing");
    }
    // 2^63 is the first double beyond int64_t; converting it is undefined.
    if (!v->is_number_integer() &&
        !(v->is_number_float() && v->get<double>() == std::round(v->get<double>()) &&
          std::fabs(v->get<double>()) < 9.2233720368547758e18)) {
      return Status::InvalidArgument(Path(key) + ": must be an integer, got " + v->dump());
    }
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX}) {
      return Status::InvalidArgument(Path(key) + ": must be at most " + std::to_string(INT64_MAX));
    }
    const int64_t x =
        v->is_number_float() ? static_cast<int64_t>(v->get<double>()) : v->get<int64_t>();
    if (x < min)
      return Status::InvalidArgument(Path(key) + ": must be at least " + std::to_string(min));
    if (x > max)
      return Status::InvalidArgument(Path(key) + ": must be at most " + std::to_string(max));
    return x;
  }
  // A duration in whole seconds, 1 to `max`: nullopt when absent. The
  // bound is checked here, before anything multiplies the value.
  Result<std::optional<int64_t>> Seconds(const std::string& key, int64_t max = kMaxSpecSeconds) {
    if (!Get(key)) return std::optional<int64_t>();
    HPO_ASSIGN_OR_RETURN(const int64_t s, Int(key, std::nullopt, 1));
    if (s > max) {
      return Status::InvalidArgument(Path(key) + ": must be at most " + std::to_string(max) +
                                     " s (" + std::to_string(max / 86'400) + " days), got " +
                                     std::to_string(s));
    }
    return std::optional<int64_t>(s);
  }
  Result<bool> Bool(const std::string& key, bool fallback) {
    const json* v = Get(key);
    if (!v) return fallback;
    if (!v->is_boolean()) return Status::InvalidArgument(Path(key) + ": must be true or false");
    return v->get<bool>();
  }
  Status NoOthers() const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (!used_.count(it.key())) {
        std::string known;
        for (const auto& k : used_) known += (known.empty() ? "" : ", ") + k;
        return Status::InvalidArgument(Path(it.key()) + ": unknown field (expected " + known + ")");
      }
    }
    return Status::OK();
  }

 private:
  const json& j_;
  std::string path_;
  std::set<std::string> used_;
};

Result<search::Direction> ParseDirection(Fields& f, const std::string& path) {
  HPO_ASSIGN_OR_RETURN(std::string dir, f.String("direction", "minimize"));
  if (dir == "minimize") return search::Direction::kMinimize;
  if (dir == "maximize") return search::Direction::kMaximize;
  return Status::InvalidArgument(path + ".direction: must be minimize or maximize, not '" + dir +
                                 "'");
}

// `objective:` (one) or `objectives:` (a list of one to kMaxObjectives).
Status ParseObjective(Fields& top, ExperimentSpec& spec) {
  const json* one = top.Get("objective");
  const json* several = top.Get("objectives");
  if (one && several) {
    return Status::InvalidArgument(
        "objectives: give either objective (one) or objectives (a list), not both");
  }
  if (!one && !several) {
    return Status::InvalidArgument(
        "objective: missing (e.g. {metric: accuracy, direction: maximize}, or objectives: a list "
        "of them)");
  }
  std::vector<std::pair<const json*, std::string>> items;
  if (one) {
    items.emplace_back(one, "objective");
  } else {
    if (!several->is_array() || several->empty()) {
      return Status::InvalidArgument("objectives: must be a non-empty list of {metric, direction}");
    }
    if (several->size() > kMaxObjectives) {
      return Status::InvalidArgument(
          "objectives: " + std::to_string(several->size()) + " objectives, more than " +
          std::to_string(kMaxObjectives) +
          " (the samplers' hypervolume and the rungs' non-dominated sorting are built for up to " +
          std::to_string(kMaxObjectives) + ")");
    }
    for (size_t i = 0; i < several->size(); ++i)
      items.emplace_back(&(*several)[i], "objectives[" + std::to_string(i) + "]");
  }
  for (const auto& [o, path] : items) {
    Fields f(*o, path);
    HPO_RETURN_IF_ERROR(f.RequireObject());
    Objective objective;
    HPO_ASSIGN_OR_RETURN(objective.metric, f.String("metric", std::nullopt));
    HPO_ASSIGN_OR_RETURN(objective.direction, ParseDirection(f, path));
    HPO_RETURN_IF_ERROR(f.NoOthers());
    for (size_t i = 0; i < spec.objectives.size(); ++i) {
      if (spec.objectives[i].metric == objective.metric) {
        return Status::InvalidArgument(path + ".metric: '" + objective.metric +
                                       "' is already objectives[" + std::to_string(i) + "]");
      }
    }
    spec.objectives.push_back(std::move(objective));
  }
  spec.metric = spec.objectives[0].metric;
  spec.direction = spec.objectives[0].direction;
  return Status::OK();
}

Result<double> ConstraintBound(const json& v, const std::string& path) {
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    return Status::InvalidArgument(path + ": must be a finite number, not " + v.dump());
  return v.get<double>();
}

// `constraints:`, a list of {metric, max and/or min}.
Status ParseConstraints(Fields& top, ExperimentSpec& spec) {
  const json* c = top.Get("constraints");
  if (!c) return Status::OK();
  if (!c->is_array()) {
    return Status::InvalidArgument(
        "constraints: must be a list of {metric, max and/or min} (e.g. [{metric: params, max: "
        "200000}])");
  }
  if (c->size() > kMaxConstraints) {
    return Status::InvalidArgument("constraints: " + std::to_string(c->size()) +
                                   " constraints, more than " + std::to_string(kMaxConstraints));
  }
  for (size_t i = 0; i < c->size(); ++i) {
    const std::string path = "constraints[" + std::to_string(i) + "]";
    Fields f((*c)[i], path);
    HPO_RETURN_IF_ERROR(f.RequireObject());
    Constraint k;
    HPO_ASSIGN_OR_RETURN(k.metric, f.String("metric", std::nullopt));
    if (const json* v = f.Get("max")) {
      HPO_ASSIGN_OR_RETURN(k.max, ConstraintBound(*v, path + ".max"));
    }
    if (const json* v = f.Get("min")) {
      HPO_ASSIGN_OR_RETURN(k.min, ConstraintBound(*v, path + ".min"));
    }
    HPO_RETURN_IF_ERROR(f.NoOthers());
    if (!k.max && !k.min)
      return Status::InvalidArgument(path + ": needs max, min or both (a bound on " + k.metric +
                                     ")");
    if (k.max && k.min && *k.min > *k.max) {
      return Status::InvalidArgument(path + ".min: " + std::to_string(*k.min) + " is above max " +
                                     std::to_string(*k.max) + ": no trial could be feasible");
    }
    for (size_t j = 0; j < spec.constraints.size(); ++j) {
      if (spec.constraints[j].metric == k.metric) {
        return Status::InvalidArgument(path + ".metric: '" + k.metric +
                                       "' is already constraints[" + std::to_string(j) +
                                       "] (give max and min in one)");
      }
    }
    spec.constraints.push_back(std::move(k));
  }
  return Status::OK();
}

// What objectives and constraints need of the rest of the spec, once it is
// all read: a metric the trials can report, prices for `cost`, and early
// stopping that ranks by every objective.
Status CheckObjectivesFit(const ExperimentSpec& spec) {
  std::vector<std::pair<std::string, std::string>> named;  // metric, its field
  for (size_t i = 0; i < spec.objectives.size(); ++i) {
    named.emplace_back(spec.objectives[i].metric,
                       spec.SeveralObjectives() ? "objectives[" + std::to_string(i) + "].metric"
                                                : std::string("objective.metric"));
  }
  for (size_t i = 0; i < spec.constraints.size(); ++i)
    named.emplace_back(spec.constraints[i].metric, "constraints[" + std::to_string(i) + "].metric");
  for (const auto& [metric, field] : named) {
    if (IsDerivedMetric(metric)) {
      if (spec.executor == ExperimentSpec::ExecutorKind::kClient) {
        std::string why = field;
        why.append(": '").append(metric).append(
            "' is derived from the device time workers report; an ask/tell client's trials "
            "run elsewhere (report it as a metric of your own under another name)");
        return Status::InvalidArgument(why);
      }
      if (metric == "cost" && spec.prices.empty()) {
        return Status::InvalidArgument(
            field + ": 'cost' is device time at cost.prices; give cost.prices too");
      }
      continue;
    }
    // (A spec of one `objective:` is not checked: it never was, and a
    // spec that ran keeps running.)
    const bool new_form = spec.source.contains("objectives") || !spec.constraints.empty();
    if (new_form && spec.executor == ExperimentSpec::ExecutorKind::kBuiltin) {
      const auto& known = BuiltinTrainerMetrics();
      const bool final_only = metric == "test_accuracy" || metric == "test_loss";
      if (std::find(known.begin(), known.end(), metric) == known.end() &&
          !(final_only && field.rfind("constraints", 0) == 0)) {
        std::string list = "device_seconds, samples_per_sec";
        if (!spec.prices.empty()) list += ", cost";
        for (const auto& k : known) list.append(", ").append(k);
        if (field.rfind("constraints", 0) == 0) list += ", test_accuracy, test_loss";
        std::string why = field;
        why.append(": the built-in trainers report no metric '")
            .append(metric)
            .append("' (one of: ")
            .append(list)
            .append(")");
        return Status::InvalidArgument(why);
      }
    }
  }
  if (!spec.SeveralObjectives()) return Status::OK();
  const std::string n = std::to_string(spec.objectives.size());
  if (spec.early_stopping == "median") {
    return Status::InvalidArgument(
        "early_stopping.rule: median compares a trial with the median of one metric, and there "
        "are " +
        n +
        " objectives (no single median orders them); use asha or hyperband, whose rungs rank "
        "several objectives by non-dominated sorting");
  }
  return Status::OK();
}

Status ParseSystem(Fields& top, ExperimentSpec& spec) {
  const json* s = top.Get("system");
  if (!s) return Status::OK();
  if (!s->is_object()) return Status::InvalidArgument("system: must map names to parameters");
  std::set<std::string> hyper;
  for (const auto& space : spec.spaces) {
    for (const auto& p : space.params) hyper.insert(p.name);
  }
  for (auto it = s->begin(); it != s->end(); ++it) {
    const std::string path = "system." + it.key();
    if (hyper.count(it.key())) {
      return Status::InvalidArgument(path + ": '" + it.key() +
                                     "' is already a hyperparameter of a space");
    }
    if (!it->is_object()) return Status::InvalidArgument(path + ": must be a mapping with a type");
    json domain = *it;
    SystemParam p;
    Fields f(*it, path);
    // LibTorch takes its inter-op thread count once per process, so the
    // built-in trainer cannot change it inside a trial: it is set where a
    // trial starts, and never probed (`mutable: true` says a program can).
    HPO_ASSIGN_OR_RETURN(p.may_change_mid_trial, f.Bool("mutable", it.key() != "inter_op_threads"));
    // A batch size changes what a model learns unless the spec says it
    // only changes speed; threads and devices never do.
    const bool batch_like = it.key().find("batch") != std::string::npos;
    HPO_ASSIGN_OR_RETURN(p.affects_accuracy, f.Bool("affects_accuracy", batch_like));
    domain.erase("mutable");
    domain.erase("affects_accuracy");
    // The same domain grammar as a space parameter.
    HPO_ASSIGN_OR_RETURN(auto one,
                         search::ParseSearchSpace(
                             json{{"name", "system"}, {"params", {{it.key(), domain}}}}, "system"));
    if (one.params.size() != 1) {
      return Status::InvalidArgument(path + ": conditional system parameters are not supported");
    }
    p.domain = one.params[0];
    spec.system.push_back(std::move(p));
  }
  return Status::OK();
}

Status ParseAlgorithm(Fields& top, ExperimentSpec& spec) {
  const json* a = top.Get("algorithm");
  if (!a) return Status::OK();
  Fields f(*a, "algorithm");
  HPO_RETURN_IF_ERROR(f.RequireObject());
  HPO_ASSIGN_OR_RETURN(spec.sampler, f.String("sampler", std::string(search::kDefaultSampler)));
  HPO_RETURN_IF_ERROR(search::CheckSamplerName(spec.sampler, "algorithm.sampler"));
  HPO_ASSIGN_OR_RETURN(int64_t seed, f.Int("seed", 0, 0));
  spec.seed = static_cast<uint64_t>(seed);
  return f.NoOthers();
}

// One option of an early-stopping rule. The engine converts the integer
// ones to the pruners' int and int64 fields, so each is an integer within
// bounds here (a double beyond them would convert with undefined behaviour);
// the pruners check how the options relate to each other.
Status CheckStoppingOption(const std::string& key, const json& v) {
  const std::string path = "early_stopping." + key;
  if (!v.is_number()) return Status::InvalidArgument(path + ": must be a number");
  if (key == "reduction_factor") {
    const Status s = search::CheckReductionFactor(v.get<double>());
    return s.ok() ? s : Status::InvalidArgument("early_stopping." + s.message());
  }
  static const std::map<std::string, std::pair<int64_t, int64_t>> kBounds = {
      {"min_resource", {1, kMaxSpecSteps}},    {"max_resource", {0, kMaxSpecSteps}},
      {"warmup_steps", {0, kMaxSpecSteps}},    {"interval_steps", {1, kMaxSpecSteps}},
      {"startup_trials", {0, kMaxSpecCount}},  {"min_trials_at_step", {1, kMaxSpecCount}},
      {"bootstrap_count", {0, kMaxSpecCount}}, {"min_early_stopping_rate", {0, kMaxSpecCount}}};
  const auto bounds = kBounds.find(key);
  if (bounds == kBounds.end()) return Status::Internal(path + ": an option without bounds");
  const auto [lo, hi] = bounds->second;
  const std::string range =
      ": must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();  // (lo and hi are >= 0)
    if (u < static_cast<uint64_t>(lo) || u > static_cast<uint64_t>(hi))
      return Status::InvalidArgument(path + range);
  } else if (v.is_number_integer()) {
    if (v.get<int64_t>() < lo || v.get<int64_t>() > hi)
      return Status::InvalidArgument(path + range);
  } else {
    const double d = v.get<double>();
    // `!(lo <= d && d <= hi)` also catches NaN.
    if (d != std::round(d) || !(static_cast<double>(lo) <= d && d <= static_cast<double>(hi))) {
      return Status::InvalidArgument(path + range + ", got " + v.dump());
    }
  }
  return Status::OK();
}

Status ParseEarlyStopping(Fields& top, ExperimentSpec& spec) {
  const json* e = top.Get("early_stopping");
  if (!e) return Status::OK();
  spec.early_stopping_given = true;
  if (!e->is_object())
    return Status::InvalidArgument("early_stopping: must be a mapping with a rule");
  Fields f(*e, "early_stopping");
  HPO_ASSIGN_OR_RETURN(spec.early_stopping, f.String("rule", "none"));
  HPO_ASSIGN_OR_RETURN(const search::StoppingRule* rule,
                       search::FindStoppingRule(spec.early_stopping));
  spec.early_stopping_options = json::object();
  if (const json* t = f.Get("type")) {
    if (!t->is_string() || (*t != "stop" && *t != "promotion")) {
      return Status::InvalidArgument("early_stopping.type: must be stop or promotion, not " +
                                     t->dump());
    }
    if (*t == "promotion" && !rule->rungs) {
      return Status::InvalidArgument(
          "early_stopping.type: promotion needs rule asha or hyperband, not '" +
          spec.early_stopping + "'");
    }
    spec.early_stopping_options["type"] = *t;  // resolved with the executor, in ParseExperimentSpec
  }
  if (const json* c = f.Get("promotion")) {
    const auto criterion =
        c->is_string() ? search::ParsePromotionCriterion(c->get<std::string>()) : std::nullopt;
    if (!criterion) {
      return Status::InvalidArgument(
          "early_stopping.promotion: must be top_fraction or quantile, not " + c->dump());
    }
    if (!rule->rungs) {
      return Status::InvalidArgument(
          "early_stopping.promotion: promotion needs rule asha or hyperband, not '" +
          spec.early_stopping + "'");
    }
    spec.promotion_criterion = *criterion;
    spec.early_stopping_options["promotion"] =
        *c;  // checked against the type in ResolveStoppingType
  }
  for (auto it = e->begin(); it != e->end(); ++it) {
    if (it.key() == "rule" || it.key() == "type" || it.key() == "promotion") continue;
    if (std::find(rule->options.begin(), rule->options.end(), it.key()) == rule->options.end()) {
      std::string known = "rule, type, promotion";
      for (const auto& k : std::set<std::string>(rule->options.begin(), rule->options.end()))
        known += ", " + k;
      return Status::InvalidArgument("early_stopping." + it.key() + ": unknown field (expected " +
                                     known + "): not an option of rule '" + spec.early_stopping +
                                     "'");
    }
    HPO_RETURN_IF_ERROR(CheckStoppingOption(it.key(), *it));
    spec.early_stopping_options[it.key()] = *it;
  }
  return Status::OK();
}

Status ParseBudget(Fields& top, ExperimentSpec& spec) {
  const json* b = top.Get("budget");
  if (!b) return Status::OK();
  Fields f(*b, "budget");
  HPO_RETURN_IF_ERROR(f.RequireObject());
  HPO_ASSIGN_OR_RETURN(spec.max_trials, f.Int("max_trials", spec.max_trials, 1));
  HPO_ASSIGN_OR_RETURN(spec.max_parallel, f.Int("max_parallel", spec.max_parallel, 1));
  HPO_ASSIGN_OR_RETURN(spec.steps_per_trial,
                       f.Int("steps_per_trial", spec.steps_per_trial, 1, kMaxSpecSteps));
  spec.steps_per_trial_given = f.Get("steps_per_trial") != nullptr;
  HPO_ASSIGN_OR_RETURN(spec.max_wall_time_s, f.Seconds("max_wall_time_s"));
  return f.NoOthers();
}

// placement.migrate, once the executor and the early stopping are known:
// true by default wherever it applies, and an error where asked for and it
// cannot apply (naming why).
Status ResolveMigrate(const json* given, ExperimentSpec& spec) {
  const bool rung_rule = HasRungs(spec.early_stopping);
  std::string why_not;
  if (spec.executor != ExperimentSpec::ExecutorKind::kBuiltin) {
    why_not =
        "a trial moves through a checkpoint taken at any step, which only the built-in trainers "
        "take "
        "(a command saves its state at HPO_STOP_STEP only)";
  } else if (!rung_rule || spec.early_stopping_type != ExperimentSpec::StoppingType::kStop) {
    why_not =
        "it applies to early_stopping rule asha or hyperband with type: stop (promotion-type "
        "trials are "
        "placed anew at every rung already)";
  } else if (spec.placement_policy != "speed") {
    why_not = "only the speed policy moves trials (fifo and shadho place each trial once)";
  }
  if (!given) {
    spec.placement_migrate = why_not.empty();
    return Status::OK();
  }
  if (!given->is_boolean())
    return Status::InvalidArgument("placement.migrate: must be true or false, not " +
                                   given->dump());
  if (given->get<bool>() && !why_not.empty())
    return Status::InvalidArgument("placement.migrate: " + why_not);
  spec.placement_migrate = given->get<bool>();
  return Status::OK();
}

Status ParsePlacement(Fields& top, ExperimentSpec& spec) {
  const json* p = top.Get("placement");
  if (!p) return ResolveMigrate(nullptr, spec);
  Fields f(*p, "placement");
  HPO_RETURN_IF_ERROR(f.RequireObject());
  HPO_ASSIGN_OR_RETURN(spec.placement_policy, f.String("policy", "speed"));
  if (!scheduler::ParsePolicyKind(spec.placement_policy)) {
    return Status::InvalidArgument("placement.policy: must be speed, fifo or shadho, not '" +
                                   spec.placement_policy + "'");
  }
  if (const json* order = f.Get("class_order")) {
    if (!order->is_array() || order->empty()) {
      return Status::InvalidArgument(
          "placement.class_order: must be a non-empty list of device classes");
    }
    for (size_t i = 0; i < order->size(); ++i) {
      if (!(*order)[i].is_string()) {
        return Status::InvalidArgument("placement.class_order[" + std::to_string(i) +
                                       "]: must be a string");
      }
      spec.placement_class_order.push_back((*order)[i].get<std::string>());
    }
  }
  if (spec.placement_policy == "shadho" && spec.placement_class_order.empty()) {
    return Status::InvalidArgument(
        "placement.class_order: shadho needs the device classes, strongest first");
  }
  HPO_ASSIGN_OR_RETURN(const int64_t wait, f.Int("max_wait_s", 600, 1, kMaxSpecWaitSeconds));
  spec.placement_max_wait_s = static_cast<double>(wait);
  const json* migrate = f.Get("migrate");
  HPO_RETURN_IF_ERROR(f.NoOthers());
  return ResolveMigrate(migrate, spec);
}

// "2026-12-01T18:00:00Z", "2026-12-01T18:00:00.5+01:00" (RFC 3339) -> Unix ms.
std::optional<int64_t> ParseRfc3339(const std::string& text) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0, n = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6 ||
      n != 19) {
    return std::nullopt;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60 || y < 1970 ||
      y > 9999) {
    return std::nullopt;
  }
  size_t i = 19;
  int64_t ms = 0;
  if (i < text.size() && text[i] == '.') {
    int64_t scale = 100;
    for (++i; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      ms += (text[i] - '0') * scale;
      scale /= 10;
    }
  }
  int64_t offset_min = 0;
  if (i < text.size() && (text[i] == 'Z' || text[i] == 'z')) {
    ++i;
  } else if (i + 6 == text.size() && (text[i] == '+' || text[i] == '-') && text[i + 3] == ':') {
    int oh = 0, om = 0;
    if (std::sscanf(text.c_str() + i + 1, "%2d:%2d", &oh, &om) != 2 || oh > 23 || om > 59)
      return std::nullopt;
    offset_min = int64_t{text[i] == '+' ? 1 : -1} * (oh * 60 + om);
    i += 6;
  } else {
    return std::nullopt;
  }
  if (i != text.size()) return std::nullopt;
  // Days from the civil date (Howard Hinnant's algorithm), no time zone database.
  const int yy = y - (mo <= 2);
  const int era = yy / 400;
  const int yoe = yy - era * 400;
  const int doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const int64_t days = static_cast<int64_t>(era) * 146097 + doe - 719468;
  return ((days * 86400 + int64_t{h} * 3600 + int64_t{mi} * 60 + sec) - offset_min * 60) * 1000 +
         ms;
}

Status ParseCost(Fields& top, ExperimentSpec& spec) {
  const json* c = top.Get("cost");
  if (!c) return Status::OK();
  Fields f(*c, "cost");
  HPO_RETURN_IF_ERROR(f.RequireObject());
  if (const json* prices = f.Get("prices")) {
    if (!prices->is_object() || prices->empty()) {
      return Status::InvalidArgument(
          "cost.prices: must map device classes or worker labels (k=v) to prices per hour");
    }
    for (auto it = prices->begin(); it != prices->end(); ++it) {
      if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0) {
        return Status::InvalidArgument("cost.prices." + it.key() +
                                       ": must be a price per hour >= 0");
      }
      spec.prices[it.key()] = it->get<double>();
    }
  }
  HPO_ASSIGN_OR_RETURN(spec.deadline_s, f.Seconds("deadline_s"));
  if (const json* d = f.Get("deadline")) {
    const auto ms = d->is_string() ? ParseRfc3339(d->get<std::string>()) : std::nullopt;
    if (!ms) {
      return Status::InvalidArgument(
          "cost.deadline: must be a moment such as \"2026-12-01T18:00:00Z\", not " + d->dump());
    }
    spec.deadline_ms = ms;
  }
  if (spec.deadline_s && spec.deadline_ms) {
    return Status::InvalidArgument("cost: give deadline_s or deadline, not both");
  }
  if ((spec.deadline_s || spec.deadline_ms) && spec.prices.empty()) {
    return Status::InvalidArgument(
        "cost.prices: a deadline is weighed against prices; give the prices too");
  }
  if (const json* b = f.Get("budget")) {
    if (!b->is_number() || !std::isfinite(b->get<double>()) || b->get<double>() <= 0) {
      return Status::InvalidArgument(
          "cost.budget: must be an amount of money > 0, in the prices' unit, not " + b->dump());
    }
    if (spec.prices.empty()) {
      return Status::InvalidArgument(
          "cost.budget: device time is charged at the prices; give cost.prices too");
    }
    if (spec.executor == ExperimentSpec::ExecutorKind::kClient) {
      return Status::InvalidArgument(
          "cost.budget: an ask/tell client's trials run on its own machines, which the server does "
          "not charge; "
          "a budget needs worker trials (executor builtin or command)");
    }
    spec.budget = b->get<double>();
  }
  return f.NoOthers();
}

// What early_stopping says once the executor is known. Without the
// section, a worker experiment gets stop-type ASHA with its default options
// (min_resource 1, reduction_factor 3, as Optuna's SuccessiveHalvingPruner)
// and an ask/tell one none. The type is stop unless the spec says
// promotion: a trial goes on at once or stops at a rung, and placement may
// move it to a faster device there (placement.migrate); promotion-type
// pauses every trial at every rung and needs a checkpointing executor.
// Chosen by bench/hetero (bench/README.md, hetero).
Status ResolveStoppingType(ExperimentSpec& spec) {
  if (!spec.early_stopping_given && spec.executor != ExperimentSpec::ExecutorKind::kClient) {
    spec.early_stopping = "asha";
    spec.early_stopping_options = json::object();
  }
  const bool can_checkpoint =
      spec.executor == ExperimentSpec::ExecutorKind::kBuiltin ||
      (spec.executor == ExperimentSpec::ExecutorKind::kCommand && spec.command_checkpoints);
  const bool criterion_given = spec.early_stopping_options.erase("promotion") > 0;
  const auto given = spec.early_stopping_options.find("type");
  if (given == spec.early_stopping_options.end()) {
    spec.early_stopping_type = ExperimentSpec::StoppingType::kStop;
  } else {
    const bool promotion = *given == "promotion";
    spec.early_stopping_options.erase("type");
    if (promotion && !can_checkpoint) {
      return Status::InvalidArgument(spec.executor == ExperimentSpec::ExecutorKind::kClient
                                         ? "early_stopping.type: promotion pauses and resumes "
                                           "trials on workers; an ask/tell client's trials "
                                           "cannot be, use type: stop"
                                         : "early_stopping.type: promotion needs a program that "
                                           "keeps the checkpoint contract: set "
                                           "executor.command.checkpoints: true (see "
                                           "worker/command_executor.h), or use type: stop");
    }
    spec.early_stopping_type =
        promotion ? ExperimentSpec::StoppingType::kPromotion : ExperimentSpec::StoppingType::kStop;
  }
  // The stored spec says what was resolved, so that a later default never
  // changes an experiment already running (ParseStoredExperimentSpec).
  json& pinned = spec.source["early_stopping"];
  if (!pinned.is_object()) pinned = json::object();
  pinned["rule"] = spec.early_stopping;
  if (spec.early_stopping != "none" && spec.early_stopping != "median") {
    pinned["type"] =
        spec.early_stopping_type == ExperimentSpec::StoppingType::kPromotion ? "promotion" : "stop";
  }
  if (criterion_given && spec.early_stopping_type != ExperimentSpec::StoppingType::kPromotion) {
    return Status::InvalidArgument(
        "early_stopping.promotion: chooses which paused trials go on, so it needs type: promotion "
        "(a trial of "
        "type stop, the default, never waits at a rung; " +
        std::string(can_checkpoint ? "add type: promotion)"
                                   : "this executor's trials cannot pause)"));
  }
  return Status::OK();
}

Status ParseExecutor(Fields& top, ExperimentSpec& spec) {
  const json* e = top.Get("executor");
  if (!e) return Status::InvalidArgument("executor: missing (one of builtin, command, client)");
  if (!e->is_object() || e->size() != 1) {
    return Status::InvalidArgument("executor: must hold exactly one of builtin, command, client");
  }
  const std::string kind = e->begin().key();
  const json& body = e->begin().value();
  const std::string path = "executor." + kind;
  if (!body.is_null() && !body.is_object())
    return Status::InvalidArgument(path + ": must be a mapping");
  static const json kEmpty = json::object();
  Fields f(body.is_null() ? kEmpty : body, path);
  if (kind == "builtin") {
    spec.executor = ExperimentSpec::ExecutorKind::kBuiltin;
    HPO_ASSIGN_OR_RETURN(spec.trainer, f.String("trainer", std::nullopt));
    if (const json* a = f.Get("args")) {
      if (!a->is_object()) return Status::InvalidArgument(path + ".args: must be a mapping");
      spec.trainer_args = *a;
    }
  } else if (kind == "command") {
    spec.executor = ExperimentSpec::ExecutorKind::kCommand;
    const json* argv = f.Get("argv");
    if (!argv || !argv->is_array() || argv->empty()) {
      return Status::InvalidArgument(path + ".argv: must be a non-empty list of strings");
    }
    for (size_t i = 0; i < argv->size(); ++i) {
      if (!(*argv)[i].is_string()) {
        return Status::InvalidArgument(path + ".argv[" + std::to_string(i) + "]: must be a string");
      }
      spec.argv.push_back((*argv)[i].get<std::string>());
    }
    if (const json* env = f.Get("env")) {
      if (!env->is_object()) return Status::InvalidArgument(path + ".env: must be a mapping");
      for (auto it = env->begin(); it != env->end(); ++it) {
        if (!it->is_string())
          return Status::InvalidArgument(path + ".env." + it.key() + ": must be a string");
        spec.env[it.key()] = it->get<std::string>();
      }
    }
    HPO_ASSIGN_OR_RETURN(spec.timeout_s, f.Seconds("timeout_s"));
    HPO_ASSIGN_OR_RETURN(spec.command_checkpoints, f.Bool("checkpoints", false));
  } else if (kind == "client") {
    spec.executor = ExperimentSpec::ExecutorKind::kClient;
  } else {
    return Status::InvalidArgument("executor." + kind +
                                   ": unknown executor (builtin, command or client)");
  }
  return f.NoOthers();
}

// yaml-cpp's message for a \u escape it will not take (a surrogate, e.g.
// half of a JSON surrogate pair written in YAML), made into advice.
std::string UnicodeEscapeMessage(const std::string& msg) {
  const std::string prefix = YAML::ErrorMsg::INVALID_UNICODE;
  if (msg.rfind(prefix, 0) != 0) return msg;
  unsigned long value = 0;
  try {
    value = std::stoul(msg.substr(prefix.size()));
  } catch (const std::exception&) {
    return msg;
  }
  if (value < 0xD800 || value > 0xDFFF) return msg;
  char hex[8];
  std::snprintf(hex, sizeof hex, "%04lX", value);
  return std::string("\\u") + hex +
         " is a UTF-16 surrogate, which YAML does not pair: write the character itself or its \\U "
         "escape (\\U0001F600); a JSON spec may use a surrogate pair (\\ud83d\\ude00)";
}

json DescribeParam(const search::Param& p, const search::SearchSpace* space) {
  json out = {{"name", p.name}};
  switch (p.kind) {
    case search::ParamKind::kFloat:
      out["type"] = "float";
      out["low"] = p.low;
      out["high"] = p.high;
      out["log"] = p.log;
      if (p.step > 0) out["step"] = p.step;
      break;
    case search::ParamKind::kInt:
      // Integers as integers; the step only where it is not every integer.
      out["type"] = "int";
      out["low"] = static_cast<int64_t>(p.low);
      out["high"] = static_cast<int64_t>(p.high);
      out["log"] = p.log;
      if (p.step > 1) out["step"] = static_cast<int64_t>(p.step);
      break;
    case search::ParamKind::kCategorical:
      out["type"] = "categorical";
      out["choices"] = p.choices;
      break;
  }
  if (space && p.conditional()) {
    const search::Param& parent = space->params[p.parent];
    out["when"] = {{"param", parent.name}, {"is", parent.choices[p.parent_choice]}};
  }
  return out;
}

}  // namespace

std::string WorkloadKey(const ExperimentSpec& spec, size_t space) {
  const search::SearchSpace& s = spec.spaces.at(space);
  if (!spec.workload.empty()) return spec.workload + "/" + s.name;
  std::string program = "client";
  json executor = {{"kind", "client"}};
  if (spec.executor == ExperimentSpec::ExecutorKind::kBuiltin) {
    program = spec.trainer;
    executor = {{"kind", "builtin"}, {"trainer", spec.trainer}, {"args", spec.trainer_args}};
  } else if (spec.executor == ExperimentSpec::ExecutorKind::kCommand) {
    if (!spec.argv.empty()) {
      const auto slash = spec.argv[0].rfind('/');
      program = spec.argv[0].substr(slash == std::string::npos ? 0 : slash + 1);
    }
    executor = {{"kind", "command"}, {"argv", spec.argv}, {"env", spec.env}};
  }
  json params = json::array();
  for (const auto& p : s.params) params.push_back(DescribeParam(p, &s));
  // Object keys are sorted, so the text (and the hash) does not depend on
  // the order the spec wrote them in.
  const std::string text = json{{"executor", executor}, {"params", params}}.dump();
  uint64_t hash = 14695981039346656037ull;  // FNV-1a, 64 bits
  for (const unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  return program + "/" + s.name + "@" + hex;
}

json DescribeSpec(const ExperimentSpec& spec) {
  json spaces = json::array();
  for (const auto& s : spec.spaces) {
    json params = json::array();
    for (const auto& p : s.params) params.push_back(DescribeParam(p, &s));
    spaces.push_back(
        {{"name", s.name}, {"params", params}, {"complexity_bits", s.ComplexityBits()}});
  }
  json system = json::array();
  for (const auto& p : spec.system) {
    json d = DescribeParam(p.domain, nullptr);
    d["mutable"] = p.may_change_mid_trial;
    d["affects_accuracy"] = p.affects_accuracy;
    system.push_back(std::move(d));
  }
  json executor;
  switch (spec.executor) {
    case ExperimentSpec::ExecutorKind::kBuiltin:
      executor = {{"kind", "builtin"}, {"trainer", spec.trainer}, {"args", spec.trainer_args}};
      break;
    case ExperimentSpec::ExecutorKind::kCommand:
      executor = {{"kind", "command"},
                  {"argv", spec.argv},
                  {"env", spec.env},
                  {"timeout_s", spec.timeout_s ? json(*spec.timeout_s) : json(nullptr)},
                  {"checkpoints", spec.command_checkpoints}};
      break;
    case ExperimentSpec::ExecutorKind::kClient:
      executor = {{"kind", "client"}};
      break;
  }
  json objectives = json::array();
  for (const auto& o : spec.objectives) {
    objectives.push_back(
        {{"metric", o.metric},
         {"direction", o.direction == search::Direction::kMaximize ? "maximize" : "minimize"},
         {"derived", IsDerivedMetric(o.metric)}});
  }
  json constraints = json::array();
  for (const auto& c : spec.constraints) {
    constraints.push_back({{"metric", c.metric},
                           {"max", c.max ? json(*c.max) : json(nullptr)},
                           {"min", c.min ? json(*c.min) : json(nullptr)},
                           {"derived", IsDerivedMetric(c.metric)}});
  }
  json cost = {{"prices", spec.prices}};
  if (spec.deadline_s) cost["deadline_s"] = *spec.deadline_s;
  if (spec.deadline_ms) cost["deadline_ms"] = *spec.deadline_ms;
  if (spec.budget) cost["budget"] = *spec.budget;
  return {
      {"name", spec.name},
      {"objective",
       {{"metric", spec.metric},
        {"direction", spec.direction == search::Direction::kMaximize ? "maximize" : "minimize"}}},
      {"objectives", objectives},
      {"constraints", constraints},
      {"spaces", spaces},
      {"system", system},
      {"workload", spec.workload.empty() ? json(nullptr) : json(spec.workload)},
      {"algorithm", {{"sampler", spec.sampler}, {"seed", spec.seed}}},
      {"early_stopping",
       {{"rule", spec.early_stopping},
        {"type", spec.early_stopping_type == ExperimentSpec::StoppingType::kPromotion ? "promotion"
                                                                                      : "stop"},
        {"promotion", spec.early_stopping_type == ExperimentSpec::StoppingType::kPromotion
                          ? json(search::PromotionCriterionName(spec.promotion_criterion))
                          : json(nullptr)},
        {"options", spec.early_stopping_options}}},
      {"placement",
       {{"policy", spec.placement_policy},
        {"class_order", spec.placement_class_order},
        {"max_wait_s", spec.placement_max_wait_s},
        {"migrate", spec.placement_migrate}}},
      {"cost", cost},
      {"budget",
       {{"max_trials", spec.max_trials},
        {"max_parallel", spec.max_parallel},
        {"max_wall_time_s", spec.max_wall_time_s ? json(*spec.max_wall_time_s) : json(nullptr)},
        {"steps_per_trial", spec.steps_per_trial},
        {"last_step", spec.LastStep()}}},
      {"executor", executor},
  };
}

Result<json> YamlToJson(const std::string& text) {
  if (text.size() > kMaxSpecBytes) {
    return Status::InvalidArgument("spec: larger than " + std::to_string(kMaxSpecBytes) + " bytes");
  }
  // JSON (what the API, the dashboard and the stored form send) by the JSON
  // parser: the same limits, and \u escapes as JSON means them. Anything it
  // does not take as JSON may still be YAML ({name: x} is a YAML mapping).
  const size_t start = text.find_first_not_of(" \t\r\n");
  if (start != std::string::npos && (text[start] == '{' || text[start] == '[')) {
    JsonLimits limits;
    limits.max_depth = kMaxSpecDepth;
    limits.max_bytes = kMaxSpecBytes;
    limits.max_values = kMaxSpecNodes;
    HPO_ASSIGN_OR_RETURN(std::optional<json> j, ParseJsonIfJson(text, "spec", limits));
    if (j) return std::move(*j);
  }
  // yaml-cpp parses flow collections recursively: bound their nesting before
  // it does (counting brackets inside quotes too, which errs on the safe side).
  int depth = 0;
  for (char c : text) {
    if (c == '[' || c == '{') {
      if (++depth > kMaxSpecDepth) {
        return Status::InvalidArgument("spec: nested more than " + std::to_string(kMaxSpecDepth) +
                                       " levels deep");
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  try {
    ExpansionBudget budget;
    return Convert(YAML::Load(text), budget, 0);
  } catch (const YAML::DeepRecursion& e) {
    // Block nesting ("- - - x", indentation) that yaml-cpp itself stops at.
    return Status::InvalidArgument(NestedTooDeep("line " + std::to_string(e.mark.line + 1)));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("line " + std::to_string(e.mark.line + 1) + ", column " +
                                   std::to_string(e.mark.column + 1) + ": " +
                                   UnicodeEscapeMessage(e.msg));
  }
}

bool IsDerivedMetric(const std::string& metric) {
  return metric == "device_seconds" || metric == "cost" || metric == "samples_per_sec";
}

const std::vector<std::string>& BuiltinTrainerMetrics() {
  static const std::vector<std::string> kMetrics = {"accuracy", "loss", "train_loss", "params"};
  return kMetrics;
}

bool ExperimentSpec::UsesDerivedMetrics() const {
  for (const auto& o : objectives) {
    if (IsDerivedMetric(o.metric)) return true;
  }
  for (const auto& c : constraints) {
    if (IsDerivedMetric(c.metric)) return true;
  }
  return false;
}

int64_t ExperimentSpec::LastStep() const {
  return executor == ExecutorKind::kClient && !steps_per_trial_given ? kMaxSpecSteps
                                                                     : steps_per_trial;
}

std::optional<double> PricePerHour(const ExperimentSpec& spec, const std::string& device_class,
                                   const std::map<std::string, std::string>& labels) {
  if (const auto it = spec.prices.find(device_class); it != spec.prices.end()) return it->second;
  for (const auto& [key, value] : labels) {
    if (const auto it = spec.prices.find(std::string(key).append("=").append(value));
        it != spec.prices.end())
      return it->second;
  }
  return std::nullopt;
}

Status CheckStep(const ExperimentSpec& spec, int64_t step) {
  if (step < 0)
    return Status::InvalidArgument("step: must not be negative, got " + std::to_string(step));
  const int64_t last = spec.LastStep();
  if (step <= last) return Status::OK();
  const std::string limit =
      last == spec.steps_per_trial
          ? std::to_string(last) + " (budget.steps_per_trial)"
          : std::to_string(last) +
                " (this ask/tell experiment gives no budget.steps_per_trial; the most any "
                "experiment allows)";
  return Status::InvalidArgument("step: " + std::to_string(step) +
                                 " is past the trial's last step, " + limit);
}

Result<ExperimentSpec> ParseExperimentSpec(const std::string& text) {
  HPO_ASSIGN_OR_RETURN(json j, YamlToJson(text));
  return ParseExperimentSpec(j);
}

Result<ExperimentSpec> ParseStoredExperimentSpec(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_object()) {
    // Stored before the early-stopping defaults were pinned: that server's
    // defaults, no early stopping, and promotion-type asha and hyperband
    // where trials could checkpoint.
    json& e = j["early_stopping"];
    if (e.is_null()) {
      e = {{"rule", "none"}};
    } else if (e.is_object() && !e.contains("type")) {
      const std::string rule = e.value("rule", "none");
      const json& ex = j.value("executor", json::object());
      const bool can_checkpoint =
          ex.is_object() &&
          (ex.contains("builtin") || (ex.contains("command") && ex["command"].is_object() &&
                                      ex["command"].value("checkpoints", false) == true));
      if (HasRungs(rule) && can_checkpoint) e["type"] = "promotion";
    }
  }
  if (j.is_discarded()) return ParseExperimentSpec(text);  // not JSON: as given
  return ParseExperimentSpec(j);
}

Result<ExperimentSpec> ParseExperimentSpec(const json& j) {
  if (!j.is_object())
    return Status::InvalidArgument("spec: must be a mapping (YAML) or an object (JSON)");
  HPO_RETURN_IF_ERROR(CheckStrings(j, "", 0));
  ExperimentSpec spec;
  spec.source = j;
  Fields top(j, "");
  HPO_ASSIGN_OR_RETURN(spec.name, top.String("name", std::nullopt));
  HPO_RETURN_IF_ERROR(ParseObjective(top, spec));
  const json* spaces = top.Get("spaces");
  if (!spaces) return Status::InvalidArgument("spaces: missing (a list of named search spaces)");
  HPO_ASSIGN_OR_RETURN(spec.spaces, search::ParseSearchSpaces(*spaces, "spaces"));
  for (size_t i = 0; i < spec.spaces.size(); ++i) {
    if (spec.spaces[i].name.size() > kMaxSpecNameLength) {
      return Status::InvalidArgument("spaces[" + std::to_string(i) + "].name: longer than " +
                                     std::to_string(kMaxSpecNameLength) + " bytes");
    }
  }
  HPO_RETURN_IF_ERROR(ParseSystem(top, spec));
  if (top.Get("workload")) {
    HPO_ASSIGN_OR_RETURN(spec.workload, top.String("workload", std::nullopt));
    if (spec.workload.empty() || spec.workload.size() > kMaxSpecNameLength) {
      return Status::InvalidArgument("workload: must be a non-empty name of at most " +
                                     std::to_string(kMaxSpecNameLength) + " bytes");
    }
  }
  // System parameters that change accuracy are searched like hyperparameters
  // in every space; the rest are co-tuned inside trials.
  for (const auto& p : spec.system) {
    if (!p.affects_accuracy) continue;
    for (auto& space : spec.spaces) space.params.push_back(p.domain);
  }
  HPO_RETURN_IF_ERROR(ParseAlgorithm(top, spec));
  HPO_RETURN_IF_ERROR(ParseEarlyStopping(top, spec));
  HPO_RETURN_IF_ERROR(ParseBudget(top, spec));
  HPO_RETURN_IF_ERROR(ParseExecutor(top, spec));
  HPO_RETURN_IF_ERROR(ResolveStoppingType(spec));
  HPO_RETURN_IF_ERROR(ParsePlacement(top, spec));
  HPO_RETURN_IF_ERROR(ParseCost(top, spec));
  HPO_RETURN_IF_ERROR(ParseConstraints(top, spec));
  HPO_RETURN_IF_ERROR(top.NoOthers());
  HPO_RETURN_IF_ERROR(CheckObjectivesFit(spec));
  if (spec.max_parallel > spec.max_trials) spec.max_parallel = spec.max_trials;
  // Every {placeholder} of a command must be a parameter somewhere.
  for (size_t i = 0; i < spec.argv.size(); ++i) {
    const std::string& arg = spec.argv[i];
    for (size_t open = arg.find('{'); open != std::string::npos; open = arg.find('{', open + 1)) {
      const size_t close = arg.find('}', open);
      if (close == std::string::npos) break;
      const std::string name = arg.substr(open + 1, close - open - 1);
      bool known = name == "trial_id" || name == "step" || name == "steps";
      for (const auto& s : spec.spaces) known = known || s.Find(name) >= 0;
      for (const auto& p : spec.system) known = known || p.domain.name == name;
      if (!known) {
        return Status::InvalidArgument("executor.command.argv[" + std::to_string(i) + "]: {" +
                                       name + "} is not a parameter of any space or of system");
      }
    }
  }
  for (size_t i = 0; i < spec.spaces.size(); ++i)
    spec.workload_keys.push_back(WorkloadKey(spec, i));
  return spec;
}

}  // namespace hpo::server
