#include "server/store/store.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "server/store/sql_driver.h"
#include "server/store/sql_store.h"
#include "server/store/store_url.h"

namespace hpo::store {

std::string_view ToString(ExperimentState s) {
  switch (s) {
    case ExperimentState::kRunning:
      return "running";
    case ExperimentState::kCompleted:
      return "completed";
    case ExperimentState::kCancelled:
      return "cancelled";
    case ExperimentState::kFailed:
      return "failed";
  }
  return "unknown";
}

std::string_view ToString(TrialState s) {
  switch (s) {
    case TrialState::kPending:
      return "pending";
    case TrialState::kLeased:
      return "leased";
    case TrialState::kRunning:
      return "running";
    case TrialState::kPaused:
      return "paused";
    case TrialState::kCompleted:
      return "completed";
    case TrialState::kPruned:
      return "pruned";
    case TrialState::kFailed:
      return "failed";
    case TrialState::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

std::string_view ToString(DeviceKind k) { return k == DeviceKind::kCuda ? "cuda" : "cpu"; }

Result<ExperimentState> ParseExperimentState(std::string_view s) {
  for (auto v : {ExperimentState::kRunning, ExperimentState::kCompleted,
                 ExperimentState::kCancelled, ExperimentState::kFailed}) {
    if (ToString(v) == s) return v;
  }
  return Status::InvalidArgument("unknown experiment state '" + std::string(s) +
                                 "' (expected running, completed, cancelled or failed)");
}

Result<TrialState> ParseTrialState(std::string_view s) {
  for (auto v :
       {TrialState::kPending, TrialState::kLeased, TrialState::kRunning, TrialState::kPaused,
        TrialState::kCompleted, TrialState::kPruned, TrialState::kFailed, TrialState::kCancelled}) {
    if (ToString(v) == s) return v;
  }
  return Status::InvalidArgument("unknown trial state '" + std::string(s) +
                                 "' (expected pending, leased, running, paused, completed, pruned, "
                                 "failed or cancelled)");
}

Result<DeviceKind> ParseDeviceKind(std::string_view s) {
  if (s == "cpu") return DeviceKind::kCpu;
  if (s == "cuda") return DeviceKind::kCuda;
  return Status::InvalidArgument("unknown device kind '" + std::string(s) +
                                 "' (expected cpu or cuda)");
}

bool IsFinished(TrialState s) {
  return s == TrialState::kCompleted || s == TrialState::kPruned || s == TrialState::kFailed ||
         s == TrialState::kCancelled;
}

// --- SqlRow ------------------------------------------------------------------

int64_t SqlRow::Int(size_t i) const {
  const SqlValue& v = cols_.at(i);
  if (auto* x = std::get_if<int64_t>(&v)) return *x;
  if (auto* d = std::get_if<double>(&v)) return static_cast<int64_t>(*d);
  if (auto* s = std::get_if<std::string>(&v)) {
    int64_t out = 0;
    auto [p, ec] = std::from_chars(s->data(), s->data() + s->size(), out);
    if (ec == std::errc() && p == s->data() + s->size()) return out;
    Throw(Status::DataLoss("column " + std::to_string(i) + ": '" + *s + "' is not an integer"));
  }
  Throw(Status::DataLoss("column " + std::to_string(i) + " is NULL where a number was expected"));
}

double SqlRow::Real(size_t i) const {
  const SqlValue& v = cols_.at(i);
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* x = std::get_if<int64_t>(&v)) return static_cast<double>(*x);
  if (auto* s = std::get_if<std::string>(&v)) {
    char* end = nullptr;
    const double out = std::strtod(s->c_str(), &end);
    if (end == s->c_str() + s->size() && !s->empty()) return out;
    Throw(Status::DataLoss("column " + std::to_string(i) + ": '" + *s + "' is not a number"));
  }
  Throw(Status::DataLoss("column " + std::to_string(i) + " is NULL where a number was expected"));
}

std::string SqlRow::Text(size_t i) const {
  const SqlValue& v = cols_.at(i);
  if (auto* s = std::get_if<std::string>(&v)) return *s;
  if (auto* x = std::get_if<int64_t>(&v)) return std::to_string(*x);
  if (auto* d = std::get_if<double>(&v)) return std::to_string(*d);
  return "";
}

// --- OpenStore -----------------------------------------------------------------

Result<std::unique_ptr<Store>> OpenStore(const std::string& url, StoreOptions options) {
  HPO_ASSIGN_OR_RETURN(StoreUrl parsed, ParseStoreUrl(url));
  std::unique_ptr<SqlDriver> driver;
  if (parsed.backend == StoreUrl::Backend::kSqlite) {
    driver = MakeSqliteDriver(parsed.target, parsed.display, options.busy_timeout_ms);
  } else {
    if (options.pool_size < 1) return Status::InvalidArgument("pool_size: must be at least 1");
    driver = MakePostgresDriver(parsed.target, parsed.display, options.pool_size);
  }
  return SqlStore::Open(std::move(driver), std::move(options));
}

}  // namespace hpo::store
