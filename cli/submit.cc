#include "cli/submit.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <vector>

#include "cli/completion.h"
#include "cli/output.h"
#include "cli/watch.h"

namespace hpo::cli {

namespace {

// A spec is YAML unless it is JSON (which is YAML too); say which.
const char* SpecContentType(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  return first != std::string::npos && text[first] == '{' ? "application/json" : "application/yaml";
}

// A parameter's domain in one line: "float [0.0001, 0.1] log step 0.01",
// "categorical {sgd, adam}".
std::string Domain(const json& p) {
  std::string out = Str(p["type"]);
  if (p.contains("choices")) {
    std::string list;
    for (const auto& c : p["choices"]) list += (list.empty() ? "" : ", ") + Str(c);
    return out + " {" + list + "}";
  }
  out += " [" + p["low"].dump() + ", " + p["high"].dump() + "]";
  if (p.value("log", false)) out += " log";
  if (p.contains("step")) out += " step " + p["step"].dump();
  return out;
}

// The parameters as indented lines: name, domain and a note (a search
// parameter's condition; for system parameters, when they are tuned).
void PrintParams(const json& params, bool system) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : params) {
    std::string note;
    if (p.contains("when")) note = "when " + Str(p["when"]["param"]) + "=" + Str(p["when"]["is"]);
    if (system) note = p.value("mutable", false) ? "co-tuned epoch by epoch" : "set once per trial";
    rows.push_back({"  " + Str(p["name"]), Domain(p), note});
  }
  std::vector<size_t> width(3);
  for (const auto& row : rows) {
    for (size_t i = 0; i < 3; ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line = row[0] + std::string(width[0] - row[0].size() + 2, ' ') + row[1];
    if (!row[2].empty()) line += std::string(width[1] - row[1].size() + 2, ' ') + row[2];
    std::cout << line << "\n";
  }
}

// "maximize accuracy", or with several: "maximize accuracy, minimize device_seconds (derived)".
std::string ObjectivesLine(const json& spec) {
  const json& list = spec.value("objectives", json::array());
  if (list.size() <= 1) {
    return Str(spec["objective"]["direction"]) + " " + Str(spec["objective"]["metric"]);
  }
  std::string out;
  for (const auto& o : list) {
    out += (out.empty() ? "" : ", ") + Str(o["direction"]) + " " + Str(o["metric"]) +
           (o.value("derived", false) ? " (derived)" : "");
  }
  return out;
}

void PrintObjective(const json& spec) {
  std::cout << "experiment " << Str(spec["name"]) << ": " << ObjectivesLine(spec) << ", sampler "
            << Str(spec["algorithm"]["sampler"]) << ", early stopping "
            << Str(spec["early_stopping"]["rule"]) << " (" << Str(spec["early_stopping"]["type"])
            << "), placement " << Str(spec["placement"]["policy"]) << "\n";
  for (const auto& c : spec.value("constraints", json::array())) {
    std::string bound;
    if (c["min"].is_number()) bound += c["min"].dump() + " <= ";
    bound += Str(c["metric"]);
    if (c["max"].is_number()) bound += " <= " + c["max"].dump();
    std::cout << "constraint: " << bound << (c.value("derived", false) ? " (derived)" : "")
              << " (a trial outside it, or that never reports it, is infeasible)\n";
  }
}

void PrintSpaces(const json& spec) {
  for (const auto& space : spec["spaces"]) {
    char bits[32];
    std::snprintf(bits, sizeof bits, "%.1f", space.value("complexity_bits", 0.0));
    std::cout << "space " << Str(space["name"]) << " (" << space["params"].size()
              << " params, complexity " << bits << " bits)\n";
    PrintParams(space["params"], false);
  }
}

// The system parameters that do not affect accuracy: those each trial tunes.
void PrintCotuned(const json& spec) {
  json cotuned = json::array();
  for (const auto& p : spec["system"]) {
    if (!p.value("affects_accuracy", false)) cotuned.push_back(p);
  }
  if (cotuned.empty()) return;
  std::cout << "system (tuned inside each trial)\n";
  PrintParams(cotuned, true);
}

void PrintBudgetAndExecutor(const json& spec) {
  const json& b = spec["budget"];
  std::cout << "budget: " << Str(b["max_trials"]) << " trials, " << Str(b["max_parallel"])
            << " at once, " << Str(b["steps_per_trial"])
            << (b["steps_per_trial"] == 1 ? " step" : " steps") << " per trial"
            << (b["max_wall_time_s"].is_number() ? ", " + Str(b["max_wall_time_s"]) + " s at most"
                                                 : "")
            << "\n";
  const json& e = spec["executor"];
  std::cout << "executor: " << Str(e["kind"])
            << (e.contains("trainer") ? " " + Str(e["trainer"]) : "")
            << (e.contains("argv") ? " " + e["argv"].dump() : "") << "\n";
}

// hpctl submit --dry-run: the server's own checks (the route that creating
// takes, less the write), so a dry run can pass only what submit would. The
// spec parser is not linked here: cli/ speaks REST only (DESIGN.md), and
// some checks need the server's state (cost.prices against its workers) and
// its version (a newer server may take fields this hpctl does not know).
void DryRun(const HttpClientOptions& o, const std::string& file, const std::string& format) {
  const std::string text = ReadFile(file);
  json r = Call(o, "POST", "/api/v1/experiments:validate", text, SpecContentType(text));
  const json& spec = r["spec"];
  // Valid, but maybe not what was meant: stderr, so that -o json stays JSON.
  for (const json& w : r.value("warnings", json::array())) {
    std::fprintf(stderr, "hpctl: warning: %s\n", Str(w).c_str());
  }
  if (format == "json") {
    std::cout << spec.dump(2) << "\n";
    return;
  }
  Info() << file << ": a valid spec (dry run: nothing created)\n";
  PrintObjective(spec);
  PrintSpaces(spec);
  PrintCotuned(spec);
  PrintBudgetAndExecutor(spec);
}

struct SubmitOptions {
  std::string file;
  std::string format = "table";
  bool watch = false;
  bool dry_run = false;
};

int RunSubmit(const HttpClientOptions& o, const SubmitOptions& s) {
  if (s.dry_run) {
    DryRun(o, s.file, s.format);
    return kOk;
  }
  if (s.format != "table") {
    Fail(kUsage, "--output " + s.format + ": only for --dry-run (submit prints the new id)");
  }
  const int64_t created = Submit(o, s.file);
  return s.watch ? Watch(o, created) : kOk;
}

}  // namespace

int64_t Submit(const HttpClientOptions& o, const std::string& file) {
  const std::string text = ReadFile(file);
  json r = Call(o, "POST", "/api/v1/experiments", text, SpecContentType(text));
  if (g_quiet) {
    std::cout << r["id"] << "\n";
  } else {
    std::cout << "submitted experiment " << r["id"] << " (" << Str(r["name"]) << ")\n";
  }
  return r["id"].get<int64_t>();
}

Command AddSubmit(CLI::App& app, CompletionHints& hints) {
  auto s = std::make_shared<SubmitOptions>();
  auto* cmd = app.add_subcommand("submit", "submit an experiment spec (YAML or JSON)");
  Path(hints, cmd->add_option("file", s->file, "the spec file"))->required();
  auto* watch_flag = cmd->add_flag("--watch", s->watch, "then watch it");
  cmd->add_flag("--dry-run", s->dry_run,
                "check the spec on the server and print it as parsed; create nothing")
      ->excludes(watch_flag);
  Choices(hints, cmd->add_option("-o,--output", s->format, "--dry-run's output: table or json"),
          {"table", "json"});
  return {cmd, nullptr, [s](const HttpClientOptions& o) { return RunSubmit(o, *s); }};
}

}  // namespace hpo::cli
