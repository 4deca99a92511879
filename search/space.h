// Search spaces: float (linear or log, optional step), int (linear or log,
// step) and categorical parameters, with conditional subtrees (a parameter
// exists only under one choice of a categorical parent, at any depth).
//
// Every value has an internal float form (what samplers work in: the number
// itself, or the index of a categorical choice) and a JSON form (what users
// and trainers see). An assignment holds one internal value per parameter of
// its space, in the space's order, with NaN for parameters that are inactive
// under it.
//
// Pure: no I/O. Parsing reads JSON already in memory (YAML is converted to
// JSON before it gets here).
#pragma once

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace hpo::search {

using Assignment = std::vector<double>;
inline constexpr double kInactive = std::numeric_limits<double>::quiet_NaN();
inline bool IsInactive(double v) { return std::isnan(v); }

enum class ParamKind { kFloat, kInt, kCategorical };

struct Param {
  std::string name;  // unique within its space, children included
  ParamKind kind = ParamKind::kFloat;
  double low = 0;  // float and int bounds, inclusive
  double high = 1;
  bool log = false;                     // sample log-uniformly; REQUIRES low > 0
  double step = 0;                      // float: 0 = continuous; int: >= 1
  std::vector<nlohmann::json> choices;  // categorical
  // A conditional parameter exists only when the categorical at index
  // `parent` of the same space has internal value `parent_choice`.
  int parent = -1;
  int parent_choice = -1;

  // Named constructors, for code that builds spaces without parsing them.
  static Param Float(std::string name, double low, double high, bool log = false, double step = 0);
  static Param Int(std::string name, double low, double high, bool log = false, double step = 1);
  static Param Categorical(std::string name, std::vector<nlohmann::json> choices);

  bool conditional() const { return parent >= 0; }
  int num_choices() const { return static_cast<int>(choices.size()); }

  // Maps an internal value to [0, 1] (log-warped for log params; choice
  // index spread evenly for categoricals), and back, snapping to the step.
  double ToUnit(double internal) const;
  double FromUnit(double unit) const;
  // Clamps into the bounds and rounds to the step / to an integer.
  double Snap(double internal) const;
  bool Contains(double internal) const;

  nlohmann::json ToJson(double internal) const;
  // `path` names the value in errors, e.g. "params.lr".
  Result<double> FromJson(const nlohmann::json& value, const std::string& path) const;

  // How many distinct values the domain has (infinity when continuous).
  double Cardinality() const;
};

struct SearchSpace {
  std::string name;
  std::vector<Param> params;  // parents come before their children

  int size() const { return static_cast<int>(params.size()); }
  // Index of the parameter with that name, or -1.
  int Find(std::string_view param_name) const;
  // Whether param i exists under `a` (its parents, recursively, chose it).
  bool IsActive(int i, const Assignment& a) const;
  // Sets inactive params to NaN and snaps active ones into their domains.
  void Normalize(Assignment& a) const;
  // Checks every active value is in its domain and every inactive one NaN.
  Status Validate(const Assignment& a) const;

  // {"lr": 0.01, "optimizer": "sgd", "momentum": 0.9}: active params only.
  nlohmann::json ToJson(const Assignment& a) const;
  // The reverse; errors name the parameter. Unknown names are an error.
  Result<Assignment> FromJson(const nlohmann::json& params) const;

  // log2 of the number of distinct configurations, counting a continuous
  // parameter as `continuous_bits` bits (conditional subtrees add up per
  // choice). The "complexity" of space ranking.
  double ComplexityBits(double continuous_bits = 10) const;
};

// Parses one space:
//   {"name": "mlp", "params": {
//      "lr": {"type": "float", "low": 1e-4, "high": 0.1, "log": true},
//      "layers": {"type": "int", "low": 1, "high": 4},
//      "optimizer": {"type": "categorical", "choices": ["sgd", "adam"],
//                    "conditional": {"sgd": {"momentum": {"type": "float", "low": 0, "high":
//                    0.99}}}}}}
// Errors carry the path, e.g. "spaces[1].params.lr.low: must be < high".
Result<SearchSpace> ParseSearchSpace(const nlohmann::json& j, const std::string& path);
// Parses a list of spaces; names must be unique.
Result<std::vector<SearchSpace>> ParseSearchSpaces(const nlohmann::json& spaces,
                                                   const std::string& path = "spaces");

}  // namespace hpo::search
