#include "cli/trials.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <vector>

#include "cli/completion.h"
#include "cli/output.h"

namespace hpo::cli {

namespace {

// A trial's metrics as `hpctl trials` shows them: its final metrics, or,
// while it has none (running, paused at a rung, cut by the experiment's
// end), its latest report marked with its step.
std::string MetricsCell(const json& t) {
  if (t["final_metrics"].is_object()) return Human(t["final_metrics"]);
  const json latest = t.value("latest", json());
  if (latest.is_object())
    return Human(latest.value("metrics", json::object())) + " @ step " + Str(latest["step"]);
  return "";
}

// A trial's best reported objective value and its step: "0.912 @ step 7".
std::string BestCell(const json& t, const std::string& metric) {
  const json best = t.value("best", json());
  if (!best.is_object()) return "";
  const json value = best.value("metrics", json::object()).value(metric, json());
  return Str(value) + " @ step " + Str(best["step"]);
}

// Every trial of an experiment, page by page (a page is at most the
// server's max_page).
json AllTrials(const HttpClientOptions& o, int64_t id) {
  constexpr int kPage = 1000;
  json all = json::array();
  for (int64_t offset = 0;; offset += kPage) {
    json r = Call(o, "GET",
                  ExperimentPath(id) + "/trials?limit=" + std::to_string(kPage) +
                      "&offset=" + std::to_string(offset));
    for (auto& t : r["trials"]) all.push_back(std::move(t));
    if (r["trials"].size() < static_cast<size_t>(kPage)) return all;
  }
}

// A cell of the export: strings as they are, numbers as JSON writes them
// (shortest form that reads back to the same double), lists and mappings
// (a categorical choice may be one) as JSON, nothing for null or missing.
std::string Cell(const json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

// The export's records of `trials` (GET .../trials's), and its CSV. Each
// record has the trial's fields (kExportFields), its params, system setting
// and final metrics (a pruned trial's are its last report), its last report
// ("latest": a paused or cut trial has no final metrics) and its best
// report by the objective, each with its step, its device time and the
// device class that trained it longest. As JSON
// its nested params/system/metrics/latest/best objects are what
// pd.json_normalize flattens to the CSV's own column names ("params.lr",
// "metrics.loss", "latest.loss", "best.loss"). The CSV has one column per
// name seen in any trial, sorted within each group, so the columns do not
// depend on which trials ran first. `hpctl export` and `hpctl trials -o
// csv` write the same columns.
const std::vector<std::string> kExportFields = {
    "number",         "id",           "space",       "state",     "attempt",
    "level",          "started_ms",   "finished_ms", "stop_step", "reason",
    "device_seconds", "device_class", "latest_step", "best_step"};
const std::vector<const char*> kExportGroups = {"params", "system", "metrics", "latest", "best"};

json ExportRecords(const json& trials) {
  json records = json::array();
  for (const auto& t : trials) {
    json rec = json::object();
    for (const auto& f : kExportFields) rec[f] = t.value(f, json());
    const json latest = t.value("latest", json());
    rec["latest_step"] = latest.is_object() ? latest["step"] : json();
    rec["params"] = t["params"].is_object() ? t["params"] : json::object();
    rec["system"] = t["system"].is_object() ? t["system"] : json::object();
    rec["metrics"] = t["final_metrics"].is_object() ? t["final_metrics"] : json::object();
    rec["latest"] =
        latest.is_object() && latest["metrics"].is_object() ? latest["metrics"] : json::object();
    const json best = t.value("best", json());
    rec["best_step"] = best.is_object() ? best["step"] : json();
    rec["best"] =
        best.is_object() && best["metrics"].is_object() ? best["metrics"] : json::object();
    records.push_back(std::move(rec));
  }
  return records;
}

void WriteExportCsv(std::ostream& out, const json& records) {
  std::map<std::string, std::set<std::string>> names;  // group -> keys in any trial
  for (const auto& rec : records) {
    for (const char* group : kExportGroups) {
      for (auto it = rec[group].begin(); it != rec[group].end(); ++it)
        names[group].insert(it.key());
    }
  }
  std::vector<std::string> header = kExportFields;
  // AddRanks's columns, when it added them.
  const std::vector<std::string> kRankFields = {"feasible", "rank", "infeasible_reasons"};
  const bool ranked = !records.empty() && records[0].contains("rank");
  if (ranked) header.insert(header.end(), kRankFields.begin(), kRankFields.end());
  for (const char* group : kExportGroups) {
    for (const auto& k : names[group]) header.push_back(std::string(group) + "." + k);
  }
  WriteCsvRow(out, header);
  for (const auto& rec : records) {
    std::vector<std::string> row;
    for (const auto& f : kExportFields) row.push_back(Cell(rec[f]));
    if (ranked) {
      for (const auto& f : kRankFields) row.push_back(Cell(rec.value(f, json())));
    }
    for (const char* group : kExportGroups) {
      for (const auto& k : names[group]) row.push_back(Cell(rec[group].value(k, json())));
    }
    WriteCsvRow(out, row);
  }
}

// Writes `text` beside `file` and renames it over `file`, so that a failed
// write leaves no half file; fails with kUsage.
void ReplaceFile(const std::string& file, const std::string& text) {
  namespace fs = std::filesystem;
  const std::string tmp = file + ".tmp-" + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    f.close();
    if (!f) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      Fail(kUsage, file + ": cannot write the file");
    }
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    Fail(kUsage, file + ": cannot write the file (" + why + ")");
  }
}

struct ExportOptions {
  int64_t id = 0;
  std::string file;
  std::string format = "csv";
};

// hpctl export: ExportRecords of every trial, as JSON or CSV, on stdout or
// in a file (ReplaceFile).
// With several objectives or constraints, each record also says whether
// the trial is feasible, why not, and its non-domination rank (0: on the
// front; empty while it has not completed, or when it is infeasible), from
// GET .../pareto?all=true.
void AddRanks(const HttpClientOptions& o, int64_t id, json& records) {
  const json e = Call(o, "GET", ExperimentPath(id));
  const json& spec = e["spec"];
  const bool several =
      spec.contains("objectives") && spec["objectives"].is_array() && spec["objectives"].size() > 1;
  const bool constrained = spec.contains("constraints") && spec["constraints"].is_array() &&
                           !spec["constraints"].empty();
  if (!several && !constrained) return;
  const json ranked = Call(o, "GET", ExperimentPath(id) + "/pareto?all=true")["trials"];
  std::map<int64_t, const json*> by_id;
  for (const auto& t : ranked) by_id[t["id"].get<int64_t>()] = &t;
  for (auto& rec : records) {
    const auto it = rec["id"].is_number() ? by_id.find(rec["id"].get<int64_t>()) : by_id.end();
    if (it == by_id.end()) {
      rec["feasible"] = nullptr;
      rec["rank"] = nullptr;
      rec["infeasible_reasons"] = nullptr;
      continue;
    }
    const json& t = *it->second;
    rec["feasible"] = t["feasible"];
    rec["rank"] = t["rank"];
    std::string reasons;
    for (const auto& r : t["infeasible_reasons"]) reasons += (reasons.empty() ? "" : "; ") + Str(r);
    rec["infeasible_reasons"] = reasons.empty() ? json() : json(reasons);
  }
}

int Export(const HttpClientOptions& o, const ExportOptions& x) {
  json records = ExportRecords(AllTrials(o, x.id));
  AddRanks(o, x.id, records);
  std::ostringstream out;
  if (x.format == "json") {
    out << records.dump(2) << "\n";
  } else {
    WriteExportCsv(out, records);
  }
  if (x.file.empty() || x.file == "-") {
    std::cout << out.str() << std::flush;
    return kOk;
  }
  ReplaceFile(x.file, out.str());
  Info() << "wrote " << records.size() << " trials of experiment " << x.id << " to " << x.file
         << " (" << x.format << ")\n";
  return kOk;
}

// hpctl trials: a table with the metrics and params as short JSON, CSV with
// the export's flat columns (params.x, system.threads, metrics.loss), or
// the server's JSON.
struct TrialsOptions {
  int64_t id = 0;
  std::string state;
  std::string format = "table";
};

int Trials(const HttpClientOptions& o, const TrialsOptions& x) {
  std::string target = ExperimentPath(x.id) + "/trials?limit=10000";
  if (!x.state.empty()) target += "&state=" + x.state;
  json r = Call(o, "GET", target);
  if (x.format == "csv") {
    WriteExportCsv(std::cout, ExportRecords(r["trials"]));
    return kOk;
  }
  const json e = Call(o, "GET", ExperimentPath(x.id));
  const std::string metric = Str(FirstObjective(e["spec"]).value("metric", json()));
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : r["trials"]) {
    const double trained = t.value("device_seconds", 0.0);
    rows.push_back({Str(t["number"]), Str(t["id"]), Str(t["space"]), Str(t["state"]),
                    MetricsCell(t), BestCell(t, metric), trained > 0 ? Seconds(trained) : "",
                    Human(t["params"]), Human(t["system"])});
  }
  PrintRows({"number", "id", "space", "state", "metrics", "best_" + metric, "train_time", "params",
             "system"},
            rows, x.format, r["trials"]);
  return kOk;
}

// The id of the trial `ref` names: "EXPERIMENT/NUMBER" (3/25: trial 25 of
// experiment 3, as every hpctl command names trials), or the trial's id
// itself (what the REST API, `hpctl trials` and `hpctl export` call "id").
int64_t TrialId(const HttpClientOptions& o, const std::string& ref) {
  auto whole = [](const std::string& text, int64_t& out) {
    if (text.empty() || text.size() > 18 ||
        text.find_first_not_of("0123456789") != std::string::npos)
      return false;
    out = std::stoll(text);
    return true;
  };
  const auto slash = ref.find('/');
  int64_t experiment = 0, number = 0;
  if (slash == std::string::npos) {
    if (!whole(ref, number) || number <= 0) {
      Fail(kUsage,
           "trial '" + ref +
               "': expected EXPERIMENT/NUMBER (e.g. 3/25) or a trial id (a positive integer)");
    }
    return number;
  }
  if (!whole(ref.substr(0, slash), experiment) || experiment <= 0 ||
      !whole(ref.substr(slash + 1), number)) {
    Fail(kUsage, "trial '" + ref +
                     "': expected EXPERIMENT/NUMBER (e.g. 3/25: a positive experiment id, a "
                     "trial number from 0) or a trial id");
  }
  // Trials are listed by number: the first numbered above number - 1.
  const json r = Call(
      o, "GET", ExperimentPath(experiment) + "/trials?limit=1&after=" + std::to_string(number - 1));
  if (r["trials"].empty() || r["trials"][0]["number"] != number) {
    Fail(kServerError, "experiment " + std::to_string(experiment) + " has no trial " +
                           std::to_string(number) + " (`hpctl trials " +
                           std::to_string(experiment) + "` lists them)");
  }
  return r["trials"][0]["id"].get<int64_t>();
}

// hpctl logs: the trial's state, its measurements, and its reason (a
// failed trial's log tail).
int Logs(const HttpClientOptions& o, const std::string& ref) {
  const json t = Call(o, "GET", "/api/v1/trials/" + std::to_string(TrialId(o, ref)));
  // attempt: the leases of the trial's current (or last) segment; 0
  // only before its first lease.
  const int64_t attempt = t.value("attempt", int64_t{0});
  std::cout << "trial " << Str(t["number"]) << " of experiment " << Str(t["experiment_id"])
            << " (id " << Str(t["id"]) << "): " << Str(t["state"])
            << (attempt > 0 ? ", attempt " + std::to_string(attempt) : ", not leased yet") << "\n";
  for (const auto& m : t["measurements"]) {
    std::cout << "  step " << Str(m["step"]) << " " << Human(m["metrics"])
              << " samples/s=" << Str(m["samples_per_sec"]) << " system=" << Human(m["system"])
              << "\n";
  }
  if (!Str(t["reason"]).empty()) std::cout << Str(t["reason"]) << "\n";
  return kOk;
}

}  // namespace

Command AddTrials(CLI::App& app, CompletionHints& hints) {
  auto x = std::make_shared<TrialsOptions>();
  auto* cmd = app.add_subcommand("trials", "list an experiment's trials");
  cmd->add_option("id", x->id)->required();
  // The server judges the state (and names the field); the list is for completion.
  Choices(
      hints,
      cmd->add_option("--state", x->state,
                      "pending, leased, running, paused, completed, pruned, failed or cancelled"),
      {"pending", "leased", "running", "paused", "completed", "pruned", "failed", "cancelled"},
      false);
  Choices(hints, cmd->add_option("-o,--output", x->format, "table, json or csv"),
          {"table", "json", "csv"});
  return {cmd, nullptr, [x](const HttpClientOptions& o) { return Trials(o, *x); }};
}

Command AddExport(CLI::App& app, CompletionHints& hints) {
  auto x = std::make_shared<ExportOptions>();
  auto* cmd =
      app.add_subcommand("export", "every trial with params and final metrics, as CSV or JSON");
  cmd->add_option("id", x->id)->required();
  Path(hints, cmd->add_option("file", x->file, "where to write it (default: stdout)"));
  Choices(hints, cmd->add_option("-o,--output", x->format, "csv or json")->capture_default_str(),
          {"csv", "json"});
  return {cmd, nullptr, [x](const HttpClientOptions& o) { return Export(o, *x); }};
}

Command AddLogs(CLI::App& app) {
  auto ref = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("logs", "a trial's measurements and its reason/log tail");
  cmd->add_option("trial", *ref,
                  "EXPERIMENT/NUMBER (3/25: trial 25 of experiment 3), or the trial's id as the "
                  "REST API and `hpctl trials` show it")
      ->required();
  return {cmd, nullptr, [ref](const HttpClientOptions& o) { return Logs(o, *ref); }};
}

}  // namespace hpo::cli
