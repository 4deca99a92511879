#include "cli/workers.h"

#include <memory>
#include <vector>

#include "cli/completion.h"
#include "cli/output.h"

namespace hpo::cli {

namespace {

// The worker's trials: "EXPERIMENT/NUMBER (STATE)" each, space-separated.
std::string CurrentTrials(const json& w) {
  std::string running;
  for (const auto& t : w.value("current_trials", json::array())) {
    running += (running.empty() ? "" : " ") + Str(t["experiment_id"]) + "/" + Str(t["number"]) +
               " (" + Str(t["state"]) + ")";
  }
  return running;
}

// A device's measured speed: "WORKLOAD=SAMPLES_PER_SEC" each, space-separated.
std::string MeasuredSpeed(const json& d) {
  std::string speed;
  for (const auto& m : d["measured"]) {
    speed += (speed.empty() ? "" : " ") + Str(m["workload"]) + "=" + Str(m["samples_per_sec"]);
  }
  return speed;
}

// One row per device of each worker.
int Workers(const HttpClientOptions& o, const std::string& format) {
  json r = Call(o, "GET", "/api/v1/workers");
  std::vector<std::vector<std::string>> rows;
  for (const auto& w : r["workers"]) {
    const std::string running = CurrentTrials(w);
    for (const auto& d : w["devices"]) {
      rows.push_back({Str(w["id"]), Str(w["host"]), Str(d["device_class"]),
                      Str(d["benchmark_gflops"]), MeasuredSpeed(d), running});
    }
  }
  PrintRows(
      {"worker", "host", "device", "gflops", "samples/s", "current trial (experiment/number)"},
      rows, format, r);
  return kOk;
}

}  // namespace

Command AddWorkers(CLI::App& app, CompletionHints& hints) {
  auto format = std::make_shared<std::string>("table");
  auto* cmd = app.add_subcommand("workers", "workers, their devices and measured speed");
  Choices(hints, cmd->add_option("-o,--output", *format, "table or json"), {"table", "json"});
  return {cmd, nullptr, [format](const HttpClientOptions& o) { return Workers(o, *format); }};
}

}  // namespace hpo::cli
