#include "scheduler/step_samples.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace hpo::scheduler {

void StepSamples::Observe(const std::string& workload, const ReportTiming& r) {
  const auto found = last_.find(r.trial);
  if (found != last_.end()) {
    const ReportTiming& last = found->second;
    const bool same_segment =
        last.device == r.device && last.attempt == r.attempt && last.resume_step == r.resume_step;
    if (same_segment && r.step > last.step && r.samples_per_sec > 0) {
      const double per_step =
          (r.at_s - last.at_s) * r.samples_per_sec / static_cast<double>(r.step - last.step);
      if (std::isfinite(per_step) && per_step > 0) {
        auto& kept = by_workload_[workload];
        kept.push_back(per_step);
        if (kept.size() > kKept) kept.pop_front();
      }
    }
  }
  last_[r.trial] = r;
  if (last_.size() > kTrialsRemembered) last_.erase(last_.begin());  // the oldest ids
}

double StepSamples::SamplesPerStep(const std::string& workload) const {
  const auto it = by_workload_.find(workload);
  if (it == by_workload_.end() || it->second.empty()) return 0;
  std::vector<double> v(it->second.begin(), it->second.end());
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace hpo::scheduler
