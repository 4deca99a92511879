// The live fleet as the placement policy reads it (policy.h): per device
// class, how many live devices it has and when each is free. The policy
// needs nothing per device, so the caller keeps one summary and updates it
// as devices join, leave, start work and finish it (O(log D) a change), and
// a decision reads it in O(classes) instead of recounting every device. The
// engine's fleet view (server/engine/fleet_view.h) and the fleet simulator
// (simulator.h) each keep one.
//
// Pure: times are plain numbers, seconds on the caller's own clock (any
// origin); whoever reads the summary says what "now" is.
//
// Not thread-safe: the owner locks (the fleet view reads and updates it
// under its own lock).
#pragma once

#include <cstddef>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace hpo::scheduler {

class FleetSummary {
 public:
  // Adds device `id`, or moves it to `device_class` and sets its free time.
  // `free_at_s`: when it finishes what it runs now, by placement's estimate;
  // at or before now when it is idle. NaN counts as idle (-infinity).
  void Set(const std::string& id, const std::string& device_class, double free_at_s);
  // Only the free time of a listed device; false (and nothing changes) when
  // `id` is not listed.
  bool SetFreeAt(const std::string& id, double free_at_s);
  // Nothing happens when `id` is not listed.
  void Remove(const std::string& id);
  void Clear();
  bool Contains(const std::string& id) const { return devices_.count(id) > 0; }
  size_t size() const { return devices_.size(); }

  // One class as an asking device sees it.
  struct ClassView {
    std::string device_class;
    int devices = 0;  // live devices of the class, the asking one included
    // Seconds from now until the first of its devices other than the asking
    // one is free (0: one is free now); infinity when it has no other.
    double soonest_free_s = std::numeric_limits<double>::infinity();
  };
  // Every class with a live device, by name, as `asking_id` sees them at
  // `now_s`. The asking device counts in the class it is listed under; when
  // it is not listed, it counts in `asking_class` (a class of its own if no
  // listed device has it): it is asking, so it is live.
  // Cost: O(C) for C classes (one lookup of the asking id).
  std::vector<ClassView> ClassesFor(const std::string& asking_id, const std::string& asking_class,
                                    double now_s) const;
  // Seconds from now until the (n + 1)-th soonest free device of
  // `device_class` is free (0: it is free now): the wait of a trial with n
  // others queued for the class ahead of it (DecideMove's targets).
  // Infinity when the class has n devices or fewer. Cost: O(n).
  double FreeIn(const std::string& device_class, int n, double now_s) const;

 private:
  struct Device {
    std::string device_class;
    double free_at_s = 0;
  };
  std::unordered_map<std::string, Device> devices_;
  // Per class, its devices' free times; a class with no device is erased
  // (the policy must not see classes nobody has).
  std::map<std::string, std::multiset<double>> classes_;
};

}  // namespace hpo::scheduler
