#include "search/space.h"

#include <algorithm>
#include <functional>
#include <set>
#include <sstream>

#include "search/numeric.h"

namespace hpo::search {
namespace {

bool Discrete(const Param& p) { return p.kind == ParamKind::kInt || p.step > 0; }

// Number of grid points of a discrete float/int param: at most 2^53 + 1 for
// a parsed one; saturated (never undefined) for one built in code beyond that.
int64_t GridSize(const Param& p) {
  const double step = p.step > 0 ? p.step : 1;
  return RoundToInt64(std::floor((p.high - p.low) / step + 1e-9) + 1);
}

double GridHigh(const Param& p) {
  const double step = p.step > 0 ? p.step : 1;
  return p.low + static_cast<double>(GridSize(p) - 1) * step;
}

// The interval the unit cube maps onto: discrete domains get half a step on
// each side so that every grid point owns an equal share of [0, 1].
void UnitBounds(const Param& p, double* lo, double* hi) {
  if (Discrete(p)) {
    const double half = (p.step > 0 ? p.step : 1) / 2;
    *lo = p.low - half;
    *hi = GridHigh(p) + half;
  } else {
    *lo = p.low;
    *hi = p.high;
  }
  if (p.log) {
    *lo = std::log(*lo);
    *hi = std::log(*hi);
  }
}

std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// Whether `v` is an integer of magnitude at most 2^53, judged on the number
// as written rather than as a double.
bool IsExactInteger(const nlohmann::json& v) {
  constexpr int64_t kMax = int64_t{1} << 53;
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(kMax);
  if (v.is_number_integer()) return v.get<int64_t>() >= -kMax && v.get<int64_t>() <= kMax;
  const double d = v.get<double>();
  return d == std::round(d) && std::fabs(d) <= kMaxExactInteger;
}

bool ChoiceMatchesKey(const nlohmann::json& choice, const std::string& key) {
  return choice.is_string() ? choice.get<std::string>() == key : choice.dump() == key;
}

}  // namespace

// --- Param ------------------------------------------------------------------

Param Param::Float(std::string name, double low, double high, bool log, double step) {
  Param p;
  p.name = std::move(name);
  p.kind = ParamKind::kFloat;
  p.low = low;
  p.high = high;
  p.log = log;
  p.step = step;
  return p;
}

Param Param::Int(std::string name, double low, double high, bool log, double step) {
  Param p = Float(std::move(name), low, high, log, step);
  p.kind = ParamKind::kInt;
  return p;
}

Param Param::Categorical(std::string name, std::vector<nlohmann::json> choices) {
  Param p;
  p.name = std::move(name);
  p.kind = ParamKind::kCategorical;
  p.choices = std::move(choices);
  return p;
}

double Param::ToUnit(double x) const {
  if (kind == ParamKind::kCategorical) return (x + 0.5) / num_choices();
  double lo, hi;
  UnitBounds(*this, &lo, &hi);
  const double v = log ? std::log(x) : x;
  return std::clamp((v - lo) / (hi - lo), 0.0, 1.0);
}

double Param::FromUnit(double u) const {
  u = std::clamp(u, 0.0, 1.0);
  if (kind == ParamKind::kCategorical) {
    return std::min<double>(num_choices() - 1, std::floor(u * num_choices()));
  }
  double lo, hi;
  UnitBounds(*this, &lo, &hi);
  const double v = lo + u * (hi - lo);
  return Snap(log ? std::exp(v) : v);
}

double Param::Snap(double x) const {
  if (kind == ParamKind::kCategorical) {
    return std::clamp(std::round(x), 0.0, static_cast<double>(num_choices() - 1));
  }
  if (!Discrete(*this)) return std::clamp(x, low, high);
  const double step_ = step > 0 ? step : 1;
  const double k =
      std::clamp(std::round((x - low) / step_), 0.0, static_cast<double>(GridSize(*this) - 1));
  // The grid's last point may round a hair beyond high (the 1e-9 of
  // GridSize); a suggestion stays within the declared bounds.
  const double v = std::clamp(low + k * step_, low, high);
  return kind == ParamKind::kInt ? std::round(v) : v;
}

bool Param::Contains(double x) const {
  if (!std::isfinite(x)) return false;
  if (kind == ParamKind::kCategorical) {
    return x == std::round(x) && x >= 0 && x < num_choices();
  }
  if (x < low || x > high) return false;
  if (!Discrete(*this)) return true;
  const double step_ = step > 0 ? step : 1;
  const double k = (x - low) / step_;
  return std::abs(k - std::round(k)) <= 1e-9 * std::max(1.0, std::abs(k));
}

nlohmann::json Param::ToJson(double x) const {
  switch (kind) {
    case ParamKind::kCategorical:
      return choices.at(static_cast<size_t>(IndexIn(x, num_choices())));
    case ParamKind::kInt:
      return RoundToInt64(x);
    case ParamKind::kFloat:
      return x;
  }
  return nullptr;
}

Result<double> Param::FromJson(const nlohmann::json& v, const std::string& path) const {
  if (kind == ParamKind::kCategorical) {
    for (size_t i = 0; i < choices.size(); ++i) {
      if (choices[i] == v) return static_cast<double>(i);
    }
    return Status::InvalidArgument(path + ": " + v.dump() + " is not one of the choices");
  }
  if (!v.is_number()) {
    return Status::InvalidArgument(path + ": must be a number, got " + v.dump());
  }
  const double x = v.get<double>();
  if (kind == ParamKind::kInt && x != std::round(x)) {
    return Status::InvalidArgument(path + ": must be an integer, got " + v.dump());
  }
  // An integer beyond 2^53 may round onto a bound as a double
  // (9007199254740993 becomes 2^53); the bounds are within 2^53, so it is
  // outside them.
  if (x < low || x > high || (v.is_number_integer() && !IsExactInteger(v))) {
    return Status::InvalidArgument(path + ": " + v.dump() + " is outside [" + Num(low) + ", " +
                                   Num(high) + "]");
  }
  if (!Contains(x)) {
    return Status::InvalidArgument(path + ": " + v.dump() + " is not on the step grid (low " +
                                   Num(low) + ", step " + Num(step) + ")");
  }
  return x;
}

double Param::Cardinality() const {
  if (kind == ParamKind::kCategorical) return num_choices();
  if (Discrete(*this)) return static_cast<double>(GridSize(*this));
  return std::numeric_limits<double>::infinity();
}

// --- SearchSpace ------------------------------------------------------------

int SearchSpace::Find(std::string_view param_name) const {
  for (int i = 0; i < size(); ++i) {
    if (params[i].name == param_name) return i;
  }
  return -1;
}

bool SearchSpace::IsActive(int i, const Assignment& a) const {
  for (int p = i; params[p].parent >= 0; p = params[p].parent) {
    const double parent_value = a.at(params[p].parent);
    if (IsInactive(parent_value) || parent_value != params[p].parent_choice) return false;
  }
  return true;
}

void SearchSpace::Normalize(Assignment& a) const {
  a.resize(params.size(), kInactive);
  // Parents come first, so a parent is normalized before its children ask.
  for (int i = 0; i < size(); ++i) {
    if (!IsActive(i, a)) {
      a[i] = kInactive;
    } else if (!IsInactive(a[i])) {
      a[i] = params[i].Snap(a[i]);
    }
  }
}

Status SearchSpace::Validate(const Assignment& a) const {
  if (a.size() != params.size()) {
    return Status::InvalidArgument("assignment has " + std::to_string(a.size()) + " values for " +
                                   std::to_string(params.size()) + " params");
  }
  for (int i = 0; i < size(); ++i) {
    const bool active = IsActive(i, a);
    if (active && !params[i].Contains(a[i])) {
      return Status::InvalidArgument("params." + params[i].name + ": " + Num(a[i]) +
                                     " is not in its domain");
    }
    if (!active && !IsInactive(a[i])) {
      return Status::InvalidArgument("params." + params[i].name +
                                     ": set although its condition does not hold");
    }
  }
  return Status::OK();
}

nlohmann::json SearchSpace::ToJson(const Assignment& a) const {
  nlohmann::json out = nlohmann::json::object();
  for (int i = 0; i < size(); ++i) {
    if (i < static_cast<int>(a.size()) && !IsInactive(a[i]))
      out[params[i].name] = params[i].ToJson(a[i]);
  }
  return out;
}

Result<Assignment> SearchSpace::FromJson(const nlohmann::json& j) const {
  if (!j.is_object()) return Status::InvalidArgument("params: must be an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (Find(it.key()) < 0) {
      return Status::InvalidArgument("params." + it.key() + ": not a parameter of space '" + name +
                                     "'");
    }
  }
  Assignment a(params.size(), kInactive);
  for (int i = 0; i < size(); ++i) {
    const bool active = IsActive(i, a);
    auto it = j.find(params[i].name);
    if (!active) {
      if (it != j.end()) {
        return Status::InvalidArgument("params." + params[i].name +
                                       ": given although its condition does not hold");
      }
      continue;
    }
    if (it == j.end()) return Status::InvalidArgument("params." + params[i].name + ": missing");
    HPO_ASSIGN_OR_RETURN(a[i], params[i].FromJson(*it, "params." + params[i].name));
  }
  return a;
}

double SearchSpace::ComplexityBits(double continuous_bits) const {
  // log2 size of param i's subtree: a categorical adds up its choices, each
  // multiplied by the sizes of the params that exist under it.
  std::vector<std::vector<std::vector<int>>> children(params.size());
  for (int i = 0; i < size(); ++i) {
    if (params[i].kind == ParamKind::kCategorical) children[i].resize(params[i].num_choices());
  }
  for (int i = 0; i < size(); ++i) {
    if (params[i].parent >= 0) children[params[i].parent][params[i].parent_choice].push_back(i);
  }
  std::function<double(int)> bits = [&](int i) -> double {
    const Param& p = params[i];
    if (p.kind != ParamKind::kCategorical) {
      const double card = p.Cardinality();
      return std::isinf(card) ? continuous_bits : std::log2(card);
    }
    // log2(sum_c 2^b_c), computed stably.
    std::vector<double> per_choice;
    for (const auto& kids : children[i]) {
      double b = 0;
      for (int k : kids) b += bits(k);
      per_choice.push_back(b);
    }
    const double m = *std::max_element(per_choice.begin(), per_choice.end());
    double sum = 0;
    for (double b : per_choice) sum += std::exp2(b - m);
    return m + std::log2(sum);
  };
  double total = 0;
  for (int i = 0; i < size(); ++i) {
    if (params[i].parent < 0) total += bits(i);
  }
  return total;
}

// --- Parsing ----------------------------------------------------------------

namespace {

Status ParseParams(const nlohmann::json& j, const std::string& path, int parent, int parent_choice,
                   SearchSpace& space, std::set<std::string>& names);

Status ParseParam(const std::string& name, const nlohmann::json& spec, const std::string& path,
                  int parent, int parent_choice, SearchSpace& space, std::set<std::string>& names) {
  if (name.empty()) return Status::InvalidArgument(path + ": parameter names must not be empty");
  if (!names.insert(name).second) {
    return Status::InvalidArgument(path + ": name '" + name + "' is already used in this space");
  }
  Param p;
  p.name = name;
  p.parent = parent;
  p.parent_choice = parent_choice;
  const nlohmann::json* conditional = nullptr;
  if (spec.is_array()) {  // shorthand: a list of choices
    p.kind = ParamKind::kCategorical;
    p.choices.assign(spec.begin(), spec.end());
  } else if (spec.is_object()) {
    static const std::set<std::string> kKeys = {"type", "low",     "high",       "log",
                                                "step", "choices", "conditional"};
    for (auto it = spec.begin(); it != spec.end(); ++it) {
      if (!kKeys.count(it.key())) {
        return Status::InvalidArgument(path + "." + it.key() +
                                       ": unknown field (expected type, low, high, log, step, "
                                       "choices or conditional)");
      }
    }
    auto type = spec.find("type");
    if (type == spec.end() || !type->is_string()) {
      return Status::InvalidArgument(path + ".type: missing (float, int or categorical)");
    }
    const std::string t = type->get<std::string>();
    if (t == "float" || t == "int") {
      p.kind = t == "float" ? ParamKind::kFloat : ParamKind::kInt;
      for (const char* key : {"low", "high"}) {
        auto v = spec.find(key);
        if (v == spec.end() || !v->is_number()) {
          return Status::InvalidArgument(path + "." + key + ": must be a number");
        }
      }
      p.low = spec["low"].get<double>();
      p.high = spec["high"].get<double>();
      if (!std::isfinite(p.low) || !std::isfinite(p.high)) {
        return Status::InvalidArgument(path + ".low: bounds must be finite");
      }
      // Samplers map the domain onto [0, 1] through high - low.
      if (!std::isfinite(p.high - p.low)) {
        return Status::InvalidArgument(
            path +
            ".high: high - low must be a finite number (it is beyond the "
            "largest double)");
      }
      if (auto v = spec.find("log"); v != spec.end()) {
        if (!v->is_boolean()) return Status::InvalidArgument(path + ".log: must be true or false");
        p.log = v->get<bool>();
      }
      if (auto v = spec.find("step"); v != spec.end()) {
        if (!v->is_number() || v->get<double>() <= 0) {
          return Status::InvalidArgument(path + ".step: must be a positive number");
        }
        p.step = v->get<double>();
      }
      if (p.kind == ParamKind::kInt) {
        if (p.low != std::round(p.low) || p.high != std::round(p.high)) {
          return Status::InvalidArgument(path + ".low: int bounds must be integers");
        }
        for (const char* key : {"low", "high"}) {
          if (!IsExactInteger(spec[key])) {
            return Status::InvalidArgument(
                path + "." + key + ": an int parameter's bounds must be within " +
                "-2^53..2^53 (9007199254740992): samplers work in doubles, which "
                "beyond that do not hold every integer");
          }
        }
        if (p.step == 0) p.step = 1;
        if (p.step != std::round(p.step)) {
          return Status::InvalidArgument(path + ".step: must be an integer for an int parameter");
        }
      }
      if (!(p.low < p.high)) return Status::InvalidArgument(path + ".low: must be < high");
      // `!(points <= ...)` also catches NaN and infinity.
      if (p.kind == ParamKind::kFloat && p.step > 0 &&
          !((p.high - p.low) / p.step <= kMaxExactInteger)) {
        return Status::InvalidArgument(
            path +
            ".step: (high - low) / step must be at most 2^53 "
            "(9007199254740992) grid points, more than doubles can count");
      }
      if (p.log) {
        if (p.low <= 0) return Status::InvalidArgument(path + ".low: must be > 0 when log is true");
        if ((p.kind == ParamKind::kFloat && p.step > 0) ||
            (p.kind == ParamKind::kInt && p.step != 1)) {
          return Status::InvalidArgument(path + ".step: cannot be combined with log");
        }
      }
      if (spec.contains("choices") || spec.contains("conditional")) {
        return Status::InvalidArgument(path +
                                       ": choices and conditional belong to categorical "
                                       "parameters");
      }
    } else if (t == "categorical") {
      p.kind = ParamKind::kCategorical;
      auto c = spec.find("choices");
      if (c == spec.end() || !c->is_array()) {
        return Status::InvalidArgument(path + ".choices: must be a list");
      }
      p.choices.assign(c->begin(), c->end());
      if (auto cond = spec.find("conditional"); cond != spec.end()) conditional = &*cond;
      for (const char* key : {"low", "high", "log", "step"}) {
        if (spec.contains(key)) {
          return Status::InvalidArgument(path + "." + key +
                                         ": not allowed for a categorical parameter");
        }
      }
    } else {
      return Status::InvalidArgument(path + ".type: '" + t + "' is not float, int or categorical");
    }
  } else {
    return Status::InvalidArgument(path + ": must be an object with a type, or a list of choices");
  }
  if (p.kind == ParamKind::kCategorical) {
    if (p.choices.empty()) return Status::InvalidArgument(path + ".choices: must not be empty");
    for (size_t i = 0; i < p.choices.size(); ++i) {
      for (size_t k = 0; k < i; ++k) {
        if (p.choices[i] == p.choices[k]) {
          return Status::InvalidArgument(path + ".choices[" + std::to_string(i) +
                                         "]: " + p.choices[i].dump() + " is listed twice");
        }
      }
    }
  }
  const int index = space.size();
  space.params.push_back(std::move(p));
  if (conditional) {
    if (!conditional->is_object()) {
      return Status::InvalidArgument(path + ".conditional: must map choices to parameters");
    }
    const std::vector<nlohmann::json> choices = space.params[index].choices;
    for (auto it = conditional->begin(); it != conditional->end(); ++it) {
      int choice = -1;
      for (size_t c = 0; c < choices.size(); ++c) {
        if (ChoiceMatchesKey(choices[c], it.key())) choice = static_cast<int>(c);
      }
      const std::string cpath = path + ".conditional." + it.key();
      if (choice < 0) return Status::InvalidArgument(cpath + ": not one of the choices");
      HPO_RETURN_IF_ERROR(ParseParams(it.value(), cpath, index, choice, space, names));
    }
  }
  return Status::OK();
}

Status ParseParams(const nlohmann::json& j, const std::string& path, int parent, int parent_choice,
                   SearchSpace& space, std::set<std::string>& names) {
  if (!j.is_object()) return Status::InvalidArgument(path + ": must map names to parameters");
  for (auto it = j.begin(); it != j.end(); ++it) {
    HPO_RETURN_IF_ERROR(ParseParam(it.key(), it.value(), path + "." + it.key(), parent,
                                   parent_choice, space, names));
  }
  return Status::OK();
}

}  // namespace

Result<SearchSpace> ParseSearchSpace(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object())
    return Status::InvalidArgument(path + ": must be an object with name and params");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "name" && it.key() != "params") {
      return Status::InvalidArgument(path + "." + it.key() +
                                     ": unknown field (expected name, params)");
    }
  }
  SearchSpace space;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) {
    return Status::InvalidArgument(path + ".name: must be a non-empty string");
  }
  space.name = name->get<std::string>();
  auto params = j.find("params");
  if (params == j.end()) return Status::InvalidArgument(path + ".params: missing");
  std::set<std::string> names;
  HPO_RETURN_IF_ERROR(ParseParams(*params, path + ".params", -1, -1, space, names));
  if (space.params.empty()) return Status::InvalidArgument(path + ".params: must not be empty");
  return space;
}

Result<std::vector<SearchSpace>> ParseSearchSpaces(const nlohmann::json& spaces,
                                                   const std::string& path) {
  if (!spaces.is_array() || spaces.empty()) {
    return Status::InvalidArgument(path + ": must be a non-empty list of spaces");
  }
  std::vector<SearchSpace> out;
  std::set<std::string> names;
  for (size_t i = 0; i < spaces.size(); ++i) {
    const std::string p = path + "[" + std::to_string(i) + "]";
    HPO_ASSIGN_OR_RETURN(SearchSpace s, ParseSearchSpace(spaces[i], p));
    if (!names.insert(s.name).second) {
      return Status::InvalidArgument(p + ".name: '" + s.name + "' is used by an earlier space");
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace hpo::search
