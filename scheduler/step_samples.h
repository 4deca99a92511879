// How many samples one step of a workload trains, learned from the time
// between a trial's reports: placement's time estimates (policy.h) are a
// trial's steps times this over a device's samples/s, and with none known
// (0) it makes no time estimates, holds nothing back and moves nothing.
// Pure (the caller gives the times); the engine's fleet view keeps one
// (server/engine/fleet_view.h) and the fleet simulator its own
// (simulator.h), fed the same reports.
//
// The rule: of two reports of one trial, seconds between them times the
// later one's samples/s, divided by the steps between them, is one
// estimate (whatever else a step does, evaluation say, counts as
// training, which is what the estimates need); a workload's value is the
// median of its last kKept estimates. Only a previous report of the same
// segment (the lease's attempt and the step it resumed after) on the same
// device counts, of an earlier step: the first report after a lease, a
// resume or a restart would count the pause, the wait for a device and
// the checkpoint's transfer as training. So a segment of one step (a
// promotion-type rung of one) teaches nothing.
//
// Not thread-safe: the caller locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>

namespace hpo::scheduler {

// One report, as StepSamples reads it.
struct ReportTiming {
  int64_t trial = 0;
  int64_t device = 0;
  // The segment: the lease's attempt and the step it resumed after (a new
  // lease, a resume or a restart begins another; so does another device).
  int attempt = 0;
  int64_t resume_step = 0;
  int64_t step = 0;
  double at_s = 0;  // when it arrived, on any steady clock (seconds)
  double samples_per_sec = 0;
};

class StepSamples {
 public:
  static constexpr size_t kKept = 31;  // estimates per workload
  static constexpr size_t kTrialsRemembered =
      10'000;  // beyond it, the lowest trial ids are forgotten

  void Observe(const std::string& workload, const ReportTiming& report);
  // The median of the workload's kept estimates; 0 when none.
  double SamplesPerStep(const std::string& workload) const;

 private:
  std::map<int64_t, ReportTiming> last_;  // by trial
  struct Kept {
    std::deque<double> estimates;  // newest last
    double median = 0;  // of `estimates`: placement reads it for every item of every lease
  };
  std::map<std::string, Kept> by_workload_;
};

}  // namespace hpo::scheduler
