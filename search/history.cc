#include "search/history.h"

#include <algorithm>
#include <iterator>

namespace hpo::search {

std::optional<double> Observation::ValueAt(int64_t step) const {
  std::optional<double> out;
  for (const auto& [s, v] : curve) {
    if (s > step) break;
    out = v;
  }
  return out;
}

const std::vector<double>* Observation::ValuesAt(int64_t step) const {
  const auto after = std::upper_bound(
      curve_values.begin(), curve_values.end(), step,
      [](int64_t s, const std::pair<int64_t, std::vector<double>>& p) { return s < p.first; });
  return after == curve_values.begin() ? nullptr : &std::prev(after)->second;
}

int History::CountCompleted() const {
  int n = 0;
  for (const auto& t : trials) n += t.status == TrialStatus::kCompleted && t.value.has_value();
  return n;
}

std::vector<double> History::CompletedValues() const {
  std::vector<double> out;
  for (const auto& t : trials) {
    if (t.status == TrialStatus::kCompleted && t.value) out.push_back(*t.value);
  }
  return out;
}

}  // namespace hpo::search
