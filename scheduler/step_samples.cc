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
        Kept& kept = by_workload_[workload];
        kept.estimates.push_back(per_step);
        if (kept.estimates.size() > kKept) kept.estimates.pop_front();
        std::vector<double> v(kept.estimates.begin(), kept.estimates.end());
        std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
        kept.median = v[v.size() / 2];
      }
    }
  }
  last_[r.trial] = r;
  if (last_.size() > kTrialsRemembered) last_.erase(last_.begin());  // the oldest ids
}

double StepSamples::SamplesPerStep(const std::string& workload) const {
  const auto it = by_workload_.find(workload);
  return it == by_workload_.end() ? 0 : it->second.median;
}

}  // namespace hpo::scheduler
