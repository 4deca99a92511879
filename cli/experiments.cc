#include "cli/experiments.h"

#include <iostream>
#include <memory>
#include <vector>

#include "cli/completion.h"
#include "cli/output.h"
#include "cli/watch.h"

namespace hpo::cli {

namespace {

// The options of a command on one experiment.
struct ExperimentOptions {
  int64_t id = 0;
  std::string format = "table";
};

int List(const HttpClientOptions& o) {
  json r = Call(o, "GET", "/api/v1/experiments?limit=1000");
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : r["experiments"]) {
    rows.push_back({Str(e["id"]), Str(e["name"]), Str(e["state"]), Str(e["trials"]["completed"]),
                    Str(e["trials"]["total"]), Str(e["reason"])});
  }
  PrintRows({"id", "name", "state", "completed", "trials", "reason"}, rows, "table", r);
  return kOk;
}

// No trial completed: the best report of any, said to be partial.
void PrintPartialBest(const json& e, const json& b) {
  std::cout << BestLine(b, FirstObjective(e["spec"]).value("metric", "")) << "\n  id      "
            << Str(b["id"]) << "\n  metrics " << Human(b["best_metrics"]) << " (step "
            << Str(b["best_step"]) << ")\n  params  " << Human(b["params"]) << "\n  system  "
            << Human(b["system"]) << "\n";
}

void PrintCompletedBest(const json& b) {
  std::cout << "trial " << Str(b["number"]) << " (id " << Str(b["id"]) << ", space "
            << Str(b["space"]) << ")\n  metrics " << Human(b["final_metrics"]) << "\n  params  "
            << Human(b["params"]) << "\n  system  " << Human(b["system"]) << "\n";
}

int Best(const HttpClientOptions& o, const ExperimentOptions& x) {
  const json e = Call(o, "GET", ExperimentPath(x.id));
  if (HasSeveralObjectives(e)) {
    PrintFront(o, x.id, x.format);
    return kOk;
  }
  json b = Call(o, "GET", ExperimentPath(x.id) + "/best");
  if (x.format == "json") {
    std::cout << b.dump(2) << "\n";
  } else if (b.value("partial", false)) {
    PrintPartialBest(e, b);
  } else {
    PrintCompletedBest(b);
  }
  return kOk;
}

int Cancel(const HttpClientOptions& o, int64_t id) {
  Call(o, "POST", ExperimentPath(id) + ":cancel", "{}");
  Info() << "cancelled experiment " << id << "\n";
  return kOk;
}

}  // namespace

bool HasSeveralObjectives(const json& e) {
  const json& spec = e.value("spec", json::object());
  return spec.contains("objectives") && spec["objectives"].is_array() &&
         spec["objectives"].size() > 1;
}

void PrintFront(const HttpClientOptions& o, int64_t id, const std::string& format) {
  const json r = Call(o, "GET", ExperimentPath(id) + "/pareto");
  if (format == "json") {
    std::cout << r.dump(2) << "\n";
    return;
  }
  std::vector<std::string> header = {"trial", "space"};
  for (const auto& obj : r["objectives"])
    header.push_back(Str(obj["metric"]) + (obj["direction"] == "maximize" ? " (max)" : " (min)"));
  header.push_back("params");
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : r["trials"]) {
    std::vector<std::string> row = {Str(t["number"]), Str(t["space"])};
    for (const auto& v : t["values"]) row.push_back(Str(v));
    row.push_back(Human(t["params"]));
    rows.push_back(std::move(row));
  }
  if (rows.empty()) {
    std::cout << "experiment " << id << ": no feasible completed trial yet (" << Str(r["completed"])
              << " completed)\n";
    return;
  }
  PrintRows(header, rows, "table", r);
  std::cout << Str(r["front_size"]) << " on the front of " << Str(r["feasible"]) << " feasible, "
            << Str(r["completed"]) << " completed\n";
}

Command AddList(CLI::App& app) {
  return {app.add_subcommand("list", "list experiments"), nullptr, List};
}

Command AddStatus(CLI::App& app, CompletionHints& hints) {
  auto x = std::make_shared<ExperimentOptions>();
  auto* cmd = app.add_subcommand(
      "status", "an experiment's state, trial counts, best trial so far, elapsed time and ETA");
  cmd->add_option("id", x->id)->required();
  Choices(hints, cmd->add_option("-o,--output", x->format, "table or json"), {"table", "json"});
  return {cmd, nullptr, [x](const HttpClientOptions& o) {
            ShowStatus(o, x->id, x->format);
            return static_cast<int>(kOk);
          }};
}

Command AddWatch(CLI::App& app) {
  auto x = std::make_shared<ExperimentOptions>();
  auto* cmd = app.add_subcommand(
      "watch",
      "a live view of an experiment, until it ends; exit code 0 it completed with a result, 4 it "
      "failed or was cancelled, 5 it completed with no result (no trial completed or reported the "
      "objective)");
  cmd->add_option("id", x->id)->required();
  return {cmd, nullptr, [x](const HttpClientOptions& o) { return Watch(o, x->id); }};
}

Command AddBest(CLI::App& app, CompletionHints& hints) {
  auto x = std::make_shared<ExperimentOptions>();
  auto* cmd = app.add_subcommand("best",
                                 "the best completed trial; while none completed, the best "
                                 "reported one, marked \"best so far\"; with several "
                                 "objectives, the Pareto front of the feasible completed trials");
  cmd->add_option("id", x->id)->required();
  Choices(hints, cmd->add_option("-o,--output", x->format, "table or json"), {"table", "json"});
  return {cmd, nullptr, [x](const HttpClientOptions& o) { return Best(o, *x); }};
}

Command AddCancel(CLI::App& app) {
  auto x = std::make_shared<ExperimentOptions>();
  auto* cmd = app.add_subcommand("cancel", "cancel an experiment");
  cmd->add_option("id", x->id)->required();
  return {cmd, nullptr, [x](const HttpClientOptions& o) { return Cancel(o, x->id); }};
}

}  // namespace hpo::cli
