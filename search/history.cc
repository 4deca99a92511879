#include "search/history.h"

namespace hpo::search {

std::optional<double> Observation::ValueAt(int64_t step) const {
  std::optional<double> out;
  for (const auto& [s, v] : curve) {
    if (s > step) break;
    out = v;
  }
  return out;
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
