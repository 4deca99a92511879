#include "scheduler/fleet_summary.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace hpo::scheduler {
namespace {

// A NaN in a multiset would break its order; an unknown estimate means
// "not known to be busy", as a NaN busy time always did for the policy.
double Sanitized(double free_at_s) {
  return std::isnan(free_at_s) ? -std::numeric_limits<double>::infinity() : free_at_s;
}

void EraseOne(std::map<std::string, std::multiset<double>>& classes,
              const std::string& device_class, double free_at_s) {
  const auto c = classes.find(device_class);
  if (c == classes.end()) return;
  if (const auto it = c->second.find(free_at_s); it != c->second.end()) c->second.erase(it);
  if (c->second.empty()) classes.erase(c);
}

}  // namespace

void FleetSummary::Set(const std::string& id, const std::string& device_class, double free_at_s) {
  free_at_s = Sanitized(free_at_s);
  auto [it, inserted] = devices_.try_emplace(id, Device{device_class, free_at_s});
  if (!inserted) {
    EraseOne(classes_, it->second.device_class, it->second.free_at_s);
    it->second = Device{device_class, free_at_s};
  }
  classes_[device_class].insert(free_at_s);
}

bool FleetSummary::SetFreeAt(const std::string& id, double free_at_s) {
  const auto it = devices_.find(id);
  if (it == devices_.end()) return false;
  free_at_s = Sanitized(free_at_s);
  if (free_at_s == it->second.free_at_s) return true;
  auto& times = classes_[it->second.device_class];
  times.erase(times.find(it->second.free_at_s));
  times.insert(free_at_s);
  it->second.free_at_s = free_at_s;
  return true;
}

void FleetSummary::Remove(const std::string& id) {
  const auto it = devices_.find(id);
  if (it == devices_.end()) return;
  EraseOne(classes_, it->second.device_class, it->second.free_at_s);
  devices_.erase(it);
}

void FleetSummary::Clear() {
  devices_.clear();
  classes_.clear();
}

std::vector<FleetSummary::ClassView> FleetSummary::ClassesFor(const std::string& asking_id,
                                                              const std::string& asking_class,
                                                              double now_s) const {
  const auto asking = devices_.find(asking_id);
  const bool listed = asking != devices_.end();
  const std::string& own_class = listed ? asking->second.device_class : asking_class;
  std::vector<ClassView> out;
  out.reserve(classes_.size() + 1);
  bool own_seen = false;
  for (const auto& [cls, times] : classes_) {
    if (!own_seen && !listed && own_class < cls) {
      out.push_back({own_class, 1,
                     std::numeric_limits<double>::infinity()});  // the unlisted asker's own class
      own_seen = true;
    }
    ClassView v;
    v.device_class = cls;
    v.devices = static_cast<int>(times.size());
    auto first = times.begin();
    if (cls == own_class) {
      own_seen = true;
      if (listed) {
        // Its other devices: one copy of the asker's own time left out (equal
        // times are interchangeable, so which copy does not matter).
        if (*first == asking->second.free_at_s) ++first;
      } else {
        ++v.devices;
      }
    }
    // (min t) - now is min (t - now): subtraction keeps the order.
    if (first != times.end()) v.soonest_free_s = std::max(0.0, *first - now_s);
    out.push_back(std::move(v));
  }
  if (!own_seen) out.push_back({own_class, 1, std::numeric_limits<double>::infinity()});
  return out;
}

double FleetSummary::FreeIn(const std::string& device_class, int n, double now_s) const {
  const auto c = classes_.find(device_class);
  if (c == classes_.end() || n < 0 || static_cast<size_t>(n) >= c->second.size()) {
    return std::numeric_limits<double>::infinity();
  }
  return std::max(0.0, *std::next(c->second.begin(), n) - now_s);
}

}  // namespace hpo::scheduler
