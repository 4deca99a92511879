#include "server/spec.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdint>
#include <set>

#include "search/registry.h"

namespace hpo::server {
namespace {

using nlohmann::json;

// `budget` counts the nodes still allowed: YAML aliases share nodes, and
// expanding a few lines of nested aliases would otherwise build gigabytes.
Result<json> Convert(const YAML::Node& node, size_t& budget) {
  if (budget == 0) {
    return Status::InvalidArgument("spec: more than " + std::to_string(kMaxSpecNodes) +
                                   " values (after expanding YAML aliases)");
  }
  --budget;
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return json(nullptr);
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) {
        HPO_ASSIGN_OR_RETURN(json v, Convert(item, budget));
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
        HPO_ASSIGN_OR_RETURN(json v, Convert(kv.second, budget));
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

bool IsValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and code points beyond Unicode.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

// Every key and string of the spec: valid UTF-8 (it is stored and served as
// JSON) and within the length limits; checked first, so later messages may
// quote any of them.
Status CheckStrings(const json& j, const std::string& path, int depth) {
  const std::string where = path.empty() ? "spec" : path;
  if (depth > kMaxSpecDepth) {
    return Status::InvalidArgument(where + ": nested more than " + std::to_string(kMaxSpecDepth) + " levels deep");
  }
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (!IsValidUtf8(s)) return Status::InvalidArgument(where + ": not valid UTF-8");
    if (s.size() > kMaxSpecStringLength) {
      return Status::InvalidArgument(where + ": longer than " + std::to_string(kMaxSpecStringLength) +
                                     " bytes");
    }
  } else if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!IsValidUtf8(it.key())) return Status::InvalidArgument(where + ": a key is not valid UTF-8");
      if (it.key().size() > kMaxSpecNameLength) {
        return Status::InvalidArgument(where + ": key '" + it.key().substr(0, 40) + "...' is longer than " +
                                       std::to_string(kMaxSpecNameLength) + " bytes");
      }
      HPO_RETURN_IF_ERROR(CheckStrings(*it, path.empty() ? it.key() : path + "." + it.key(), depth + 1));
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
      return Status::InvalidArgument(Path(key) + ": longer than " + std::to_string(kMaxSpecNameLength) + " bytes");
    }
    return v->get<std::string>();
  }
  Result<int64_t> Int(const std::string& key, std::optional<int64_t> fallback, int64_t min) {
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
    const int64_t x = v->is_number_float() ? static_cast<int64_t>(v->get<double>()) : v->get<int64_t>();
    if (x < min) return Status::InvalidArgument(Path(key) + ": must be at least " + std::to_string(min));
    return x;
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

Status ParseObjective(Fields& top, ExperimentSpec& spec) {
  const json* o = top.Get("objective");
  if (!o) return Status::InvalidArgument("objective: missing (e.g. {metric: accuracy, direction: maximize})");
  Fields f(*o, "objective");
  HPO_RETURN_IF_ERROR(f.RequireObject());
  HPO_ASSIGN_OR_RETURN(spec.metric, f.String("metric", std::nullopt));
  HPO_ASSIGN_OR_RETURN(std::string dir, f.String("direction", "minimize"));
  if (dir == "minimize") {
    spec.direction = search::Direction::kMinimize;
  } else if (dir == "maximize") {
    spec.direction = search::Direction::kMaximize;
  } else {
    return Status::InvalidArgument("objective.direction: must be minimize or maximize, not '" + dir + "'");
  }
  return f.NoOthers();
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
      return Status::InvalidArgument(path + ": '" + it.key() + "' is already a hyperparameter of a space");
    }
    if (!it->is_object()) return Status::InvalidArgument(path + ": must be a mapping with a type");
    json domain = *it;
    SystemParam p;
    Fields f(*it, path);
    HPO_ASSIGN_OR_RETURN(p.may_change_mid_trial, f.Bool("mutable", true));
    // A batch size changes what a model learns unless the spec says it
    // only changes speed; threads and devices never do.
    const bool batch_like = it.key().find("batch") != std::string::npos;
    HPO_ASSIGN_OR_RETURN(p.affects_accuracy, f.Bool("affects_accuracy", batch_like));
    domain.erase("mutable");
    domain.erase("affects_accuracy");
    // The same domain grammar as a space parameter.
    HPO_ASSIGN_OR_RETURN(auto one, search::ParseSearchSpace(
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

Status ParseEarlyStopping(Fields& top, ExperimentSpec& spec) {
  const json* e = top.Get("early_stopping");
  if (!e) return Status::OK();
  if (!e->is_object()) return Status::InvalidArgument("early_stopping: must be a mapping with a rule");
  Fields f(*e, "early_stopping");
  HPO_ASSIGN_OR_RETURN(spec.early_stopping, f.String("rule", "none"));
  static const std::map<std::string, std::set<std::string>> kOptions = {
      {"none", {}},
      {"median", {"startup_trials", "warmup_steps", "interval_steps", "min_trials_at_step"}},
      {"asha", {"min_resource", "reduction_factor", "max_resource", "min_early_stopping_rate",
                "bootstrap_count"}},
      {"hyperband", {"min_resource", "max_resource", "reduction_factor"}}};
  auto rule = kOptions.find(spec.early_stopping);
  if (rule == kOptions.end()) {
    return Status::InvalidArgument("early_stopping.rule: must be none, median, asha or hyperband, not '" +
                                   spec.early_stopping + "'");
  }
  spec.early_stopping_options = json::object();
  for (auto it = e->begin(); it != e->end(); ++it) {
    if (it.key() == "rule") continue;
    if (!rule->second.count(it.key())) {
      return Status::InvalidArgument("early_stopping." + it.key() + ": not an option of rule '" +
                                     spec.early_stopping + "'");
    }
    if (!it->is_number()) return Status::InvalidArgument("early_stopping." + it.key() + ": must be a number");
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
  HPO_ASSIGN_OR_RETURN(spec.steps_per_trial, f.Int("steps_per_trial", spec.steps_per_trial, 1));
  if (f.Get("max_wall_time_s")) {
    HPO_ASSIGN_OR_RETURN(int64_t w, f.Int("max_wall_time_s", std::nullopt, 1));
    spec.max_wall_time_s = w;
  }
  return f.NoOthers();
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
  if (!body.is_null() && !body.is_object()) return Status::InvalidArgument(path + ": must be a mapping");
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
        if (!it->is_string()) return Status::InvalidArgument(path + ".env." + it.key() + ": must be a string");
        spec.env[it.key()] = it->get<std::string>();
      }
    }
    if (f.Get("timeout_s")) {
      HPO_ASSIGN_OR_RETURN(int64_t t, f.Int("timeout_s", std::nullopt, 1));
      spec.timeout_s = t;
    }
  } else if (kind == "client") {
    spec.executor = ExperimentSpec::ExecutorKind::kClient;
  } else {
    return Status::InvalidArgument("executor." + kind + ": unknown executor (builtin, command or client)");
  }
  return f.NoOthers();
}

}  // namespace

Result<json> YamlToJson(const std::string& text) {
  if (text.size() > kMaxSpecBytes) {
    return Status::InvalidArgument("spec: larger than " + std::to_string(kMaxSpecBytes) + " bytes");
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
    size_t budget = kMaxSpecNodes;
    return Convert(YAML::Load(text), budget);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("line " + std::to_string(e.mark.line + 1) + ", column " +
                                   std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
}

Result<ExperimentSpec> ParseExperimentSpec(const std::string& text) {
  HPO_ASSIGN_OR_RETURN(json j, YamlToJson(text));
  return ParseExperimentSpec(j);
}

Result<ExperimentSpec> ParseExperimentSpec(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("spec: must be a mapping (YAML) or an object (JSON)");
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
  HPO_RETURN_IF_ERROR(top.NoOthers());
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
        return Status::InvalidArgument("executor.command.argv[" + std::to_string(i) + "]: {" + name +
                                       "} is not a parameter of any space or of system");
      }
    }
  }
  return spec;
}

}  // namespace hpo::server
