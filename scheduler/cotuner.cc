#include "scheduler/cotuner.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace hpo::scheduler {

using nlohmann::json;

std::string SettingKey(const json& setting) {
  // nlohmann::json objects keep keys sorted, so dump() is canonical.
  return setting.dump();
}

std::vector<json> CandidateValues(const search::Param& p, int max_values) {
  std::vector<json> out;
  if (p.kind == search::ParamKind::kCategorical) {
    out.assign(p.choices.begin(), p.choices.end());
    return out;
  }
  std::vector<double> xs;
  if (p.log) {
    for (double x = p.low; x <= p.high * (1 + 1e-9) && static_cast<int>(xs.size()) < max_values;
         x *= 2) {
      xs.push_back(p.Snap(x));
    }
    if (xs.back() < p.high && static_cast<int>(xs.size()) < max_values) xs.push_back(p.high);
  } else {
    const double n = p.Cardinality();
    const int count =
        std::isinf(n) ? max_values : static_cast<int>(std::min<double>(n, max_values));
    for (int i = 0; i < count; ++i) {
      xs.push_back(p.Snap(count == 1 ? p.low : p.low + (p.high - p.low) * i / (count - 1)));
    }
  }
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  for (double x : xs) out.push_back(p.ToJson(x));
  return out;
}

std::string TunableKey(const std::vector<SystemDimension>& dims, const json& setting) {
  json t = json::object();
  if (setting.is_object()) {
    for (const auto& dim : dims) {
      if (const auto v = setting.find(dim.name); v != setting.end()) t[dim.name] = *v;
    }
  }
  return SettingKey(t);
}

CoTuneDecision NextSetting(const std::vector<SystemDimension>& dims,
                           const std::vector<EpochSpeed>& history, const json& start,
                           const CoTuneOptions& o, const KnownSpeeds& known) {
  if (history.empty()) return {start, false, "no epoch measured yet"};

  // The current phase starts at the last drift: a settled setting whose
  // speed moved by more than `drift` from its earlier measurement.
  size_t phase = 0;
  bool drifted = false;
  {
    std::map<std::string, double> seen;
    for (size_t i = 0; i < history.size(); ++i) {
      const std::string key = SettingKey(history[i].setting);
      auto it = seen.find(key);
      if (it != seen.end() && it->second > 0 &&
          std::abs(history[i].samples_per_sec - it->second) > o.drift * it->second) {
        phase = i;
        drifted = true;
        seen.clear();
      }
      seen[key] = history[i].samples_per_sec;
    }
  }

  // What each setting measured in this phase (its latest epoch), and the best.
  std::map<std::string, double> tried;
  std::map<std::string, json> settings;
  for (size_t i = phase; i < history.size(); ++i) {
    const std::string key = SettingKey(history[i].setting);
    tried[key] = history[i].samples_per_sec;
    settings[key] = history[i].setting;
  }
  std::string best_key;
  double best_speed = -1;
  for (const auto& [key, speed] : tried) {
    if (speed > best_speed) {
      best_speed = speed;
      best_key = key;
    }
  }
  const json& best = settings[best_key];
  // Step 4: a candidate earlier trials measured slower than the best so
  // far, compared on the model's own predictions (one scale for both).
  const auto known_best = drifted ? known.end() : known.find(TunableKey(dims, best));
  auto known_slower = [&](const json& candidate) {
    if (known_best == known.end()) return false;
    const auto it = known.find(TunableKey(dims, candidate));
    return it != known.end() && it->second < known_best->second * (1 - o.known_slower);
  };

  if (static_cast<int>(tried.size()) - 1 < o.max_probes) {
    for (const auto& dim : dims) {
      if (!dim.may_change_mid_trial || !best.contains(dim.name)) continue;
      const auto& values = dim.values;
      auto at = std::find(values.begin(), values.end(), best[dim.name]);
      if (at == values.end()) continue;
      const auto index = at - values.begin();
      for (const long step : {-1L, 1L}) {
        const long next = index + step;
        if (next < 0 || next >= static_cast<long>(values.size())) continue;
        json candidate = best;
        candidate[dim.name] = values[next];
        if (!tried.count(SettingKey(candidate)) && !known_slower(candidate)) {
          return {candidate, true,
                  std::string(drifted ? "drift; " : "") + "probe " + dim.name + "=" +
                      values[next].dump()};
        }
      }
    }
  }
  return {best, false,
          drifted                     ? "settled after drift"
          : known_best != known.end() ? "settled (neighbours known slower)"
                                      : "settled"};
}

std::optional<IgnoredChange> FirstIgnoredChange(const std::vector<SystemDimension>& dims,
                                                const std::vector<EpochSpeed>& history,
                                                const CoTuneOptions& options, size_t window,
                                                const KnownSpeeds& known) {
  // The first parameter of `ran` that differs from `asked`, or nullopt.
  auto differs = [&](const json& asked, const json& ran) -> std::optional<std::string> {
    for (const auto& dim : dims) {
      if (!dim.may_change_mid_trial || !asked.contains(dim.name)) continue;
      if (!ran.is_object() || !ran.contains(dim.name) || ran[dim.name] != asked[dim.name])
        return dim.name;
    }
    return std::nullopt;
  };
  const size_t from = std::max<size_t>(1, history.size() > window ? history.size() - window : 0);
  for (size_t i = from; i < history.size(); ++i) {
    const std::vector<EpochSpeed> before(history.begin(), history.begin() + static_cast<long>(i));
    const json asked = NextSetting(dims, before, before.back().setting, options).setting;
    const json& ran = history[i].setting;
    const auto parameter = differs(asked, ran);
    if (!parameter) continue;
    if (!known.empty() &&
        !differs(NextSetting(dims, before, before.back().setting, options, known).setting, ran)) {
      continue;
    }
    return IgnoredChange{i, *parameter, asked[*parameter],
                         ran.is_object() ? ran.value(*parameter, json()) : json()};
  }
  return std::nullopt;
}

std::vector<std::string> RestrictToDeclared(std::vector<SystemDimension>& dims,
                                            const std::map<std::string, SystemChange>& declared) {
  std::vector<std::string> unknown;
  if (declared.empty()) return unknown;
  for (auto& dim : dims) {
    auto it = declared.find(dim.name);
    if (it == declared.end()) unknown.push_back(dim.name);
    dim.may_change_mid_trial =
        dim.may_change_mid_trial && it != declared.end() && it->second == SystemChange::kMidTrial;
  }
  return unknown;
}

bool CapToDevice(SystemDimension& dim, double limit, json* setting) {
  bool changed = false;
  std::vector<json> kept;
  for (auto& v : dim.values) {
    if (v.is_number() && v.get<double>() > limit) {
      changed = true;
    } else {
      kept.push_back(std::move(v));
    }
  }
  if (kept.empty()) {
    // A whole limit as an int, as an int parameter's values are ("2", not "2.0", in a setting's
    // key).
    kept.push_back(std::floor(limit) == limit ? json(static_cast<int64_t>(limit)) : json(limit));
  }
  dim.values = std::move(kept);
  if (setting && setting->is_object() && setting->contains(dim.name)) {
    json& value = (*setting)[dim.name];
    if (value.is_number() && value.get<double>() > limit) {
      // The largest value left that the device can take.
      json best;
      for (const auto& v : dim.values) {
        if (v.is_number() && (best.is_null() || v.get<double>() > best.get<double>())) best = v;
      }
      value = best;
      changed = true;
    }
  }
  return changed;
}

}  // namespace hpo::scheduler
