// hpctl: the HeteroTune command line, over the REST API only.
//
// Exit codes: 0 success; 1 the server answered with an error (the message
// is printed); 2 bad usage or a bad local file; 3 the server cannot be
// reached; 4 an experiment ended without success (watch/run: failed or
// cancelled); 5 an experiment ended with no result (watch/run: completed,
// but no trial completed or reported the objective); 130 interrupted
// (Ctrl-C). Not 3 for the last: scripts read 3 as "retry, the server is down".
//
// Output: what a command was asked for (tables, CSV, JSON, a watch view,
// ids) goes to stdout; errors to stderr as one line. --quiet drops what is
// only news ("submitted experiment 3 (name)", "cancelled ...", the watch
// view, "wrote N trials to FILE") and keeps the data and the errors.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "common/cli_env.h"
#include "common/http_client.h"
#include "common/server_ports.h"
#include "common/token.h"
#ifdef HPO_HAVE_WORKER_INVENTORY
#include "worker/inventory.h"
#endif

namespace {

using nlohmann::json;
using hpo::HttpClientOptions;

enum Exit {
  kOk = 0,
  kServerError = 1,
  kUsage = 2,
  kUnreachable = 3,
  kExperimentFailed = 4,
  kNoResult = 5,
  kInterrupted = 130
};

std::atomic<bool> g_interrupted{false};
void OnSignal(int) { g_interrupted = true; }

// --quiet: news goes to Info(), which then writes nowhere.
bool g_quiet = false;
std::ostream& Info() {
  static std::ostream nowhere(nullptr);
  return g_quiet ? nowhere : std::cout;
}

struct Failure {
  int code;
  std::string message;
};

[[noreturn]] void Fail(int code, const std::string& message) { throw Failure{code, message}; }

json Call(const HttpClientOptions& o, const std::string& method, const std::string& target,
          const std::string& body = "", const std::string& content_type = "application/json") {
  auto r = hpo::HttpRequestOnce(o, method, target, body, content_type);
  if (!r.ok()) {
    Fail(kUnreachable,
         r.status().message() + " (is hpo-server running? set --server or HPO_REST_SERVER)");
  }
  if (r->status >= 300 && r->status < 400) {
    // The HTTP client follows no redirect, so the request and its token went
    // to --server only. Say so rather than read the redirect's body as an answer.
    const auto location = r->headers.find("location");
    Fail(kServerError,
         "the server at " + std::string(o.tls ? "https://" : "http://") + o.host + ":" +
             std::to_string(o.port) + " answered " + std::to_string(r->status) + ", a redirect " +
             (location == r->headers.end() ? "without a Location" : "to " + location->second) +
             "; hpctl follows no redirect, so the token went nowhere else (hpo-server itself never "
             "redirects; if that address is the server, set --server or HPO_REST_SERVER to it)");
  }
  json j = json::parse(r->body, nullptr, false);
  if (r->status >= 400) {
    const std::string msg = j.is_object() && j.contains("error") ? j["error"].value("message", r->body) : r->body;
    Fail(kServerError, msg);
  }
  return j;
}

// A float as a person reads it: four significant digits, without an
// exponent from 0.0001 to a million, without trailing zeros (0.912345678:
// 0.9123; 12.3456: 12.35; 0.5: 0.5; 123456.7: 123457). Tables, watch and
// status show these; JSON and CSV keep every digit.
std::string Rounded(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  const double a = std::fabs(x);
  if (a == 0) return "0";
  char buf[64];
  if (a < 1e-4 || a >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.4g", x);
    return buf;
  }
  const int decimals = std::max(0, 3 - static_cast<int>(std::floor(std::log10(a))));
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  std::string out = buf;
  if (out.find('.') != std::string::npos) {
    out.erase(out.find_last_not_of('0') + 1);
    if (out.back() == '.') out.pop_back();
  }
  return out == "-0" ? "0" : out;
}

// A JSON value as the human output shows it: JSON, with its floats Rounded.
std::string Human(const json& v) {
  if (v.is_number_float()) return Rounded(v.get<double>());
  if (!v.is_structured()) return v.dump();
  std::string out = v.is_object() ? "{" : "[";
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it != v.begin()) out += ",";
    if (v.is_object()) out += json(it.key()).dump() + ":";
    out += Human(*it);
  }
  return out + (v.is_object() ? "}" : "]");
}

// A cell or field of the human output: strings as they are, null as
// nothing, the rest as Human.
std::string Str(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  return Human(v);
}

// One CSV record (RFC 4180): a cell holding a comma, a quote or a line
// break is quoted, its quotes doubled; what Python's csv module and pandas
// read back as the same strings.
void WriteCsvRow(std::ostream& out, const std::vector<std::string>& cells) {
  for (size_t i = 0; i < cells.size(); ++i) {
    const std::string& s = cells[i];
    if (i) out << ',';
    if (s.find_first_of(",\"\r\n") == std::string::npos) {
      out << s;
      continue;
    }
    out << '"';
    for (char c : s) out << (c == '"' ? "\"\"" : std::string(1, c));
    out << '"';
  }
  out << '\n';  // not RFC 4180's CRLF: a line of a Unix pipe; both readers take either
}

// Rows of cells as an aligned table, CSV or JSON.
void PrintRows(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
               const std::string& format, const json& raw) {
  if (format == "json") {
    std::cout << raw.dump(2) << "\n";
    return;
  }
  if (format == "csv") {
    WriteCsvRow(std::cout, header);
    for (const auto& r : rows) WriteCsvRow(std::cout, r);
    return;
  }
  std::vector<size_t> width(header.size());
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) {
      std::cout << cells[i] << (i + 1 < cells.size() ? std::string(width[i] - cells[i].size() + 2, ' ') : "");
    }
    std::cout << "\n";
  };
  line(header);
  for (const auto& r : rows) line(r);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) Fail(kUsage, path + ": cannot read the file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Seconds(double s) {
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%dh%02dm", int(s / 3600), int(s / 60) % 60);
  } else if (s >= 60) {
    std::snprintf(buf, sizeof buf, "%dm%02ds", int(s / 60), int(s) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ds", int(s));
  }
  return buf;
}

// The best completed trial of an experiment, kept from reads of what changed
// (server: ?since= cursors): the first read pages through every completed
// trial by keyset, later ones ask only for trials completed since the last
// read's cursor, so a poll of an experiment with 10,000 trials reads only its
// news. Ties go to the lower number, as GET .../best. A cursor the server
// refuses (409: it is another server's database now) starts a full read.
class BestSoFar {
 public:
  BestSoFar(const HttpClientOptions& o, int64_t id, const json& objective)
      : o_(o),
        id_(id),
        metric_(objective.value("metric", "")),
        maximize_(objective.value("direction", "minimize") == "maximize") {}

  // Reads what changed; the best trial so far, or null.
  const json& Update() {
    if (!Read()) {
      cursor_.clear();
      best_ = json();
      Read();
    }
    return best_;
  }

 private:
  // False when the server refused the cursor.
  bool Read() {
    std::string cursor;
    for (json after;;) {
      std::string target = "/api/v1/experiments/" + std::to_string(id_) + "/trials?state=completed&limit=10000";
      if (!after.is_null()) target += "&after=" + after.dump();
      if (!cursor_.empty()) target += "&since=" + cursor_;
      auto r = hpo::HttpRequestOnce(o_, "GET", target);
      if (r.ok() && r->status == 409 && !cursor_.empty()) return false;
      // Any other failure: Call asks again and exits with the server's message.
      json page = r.ok() && r->status == 200 ? json::parse(r->body, nullptr, false) : Call(o_, "GET", target);
      if (cursor.empty()) cursor = Str(page["cursor"]);
      for (const json& t : page["trials"]) Consider(t);
      after = page["next_after"];
      if (after.is_null()) break;
    }
    cursor_ = cursor;
    return true;
  }

  void Consider(const json& t) {
    const json v = t.value("final_metrics", json::object()).value(metric_, json());
    if (!v.is_number()) return;
    const double x = v.get<double>();
    const bool better = best_.is_null() || (maximize_ ? x > best_value_ : x < best_value_) ||
                        (x == best_value_ && t["number"].get<int64_t>() < best_["number"].get<int64_t>());
    if (!better) return;
    best_ = t;
    best_value_ = x;
  }

  const HttpClientOptions& o_;
  const int64_t id_;
  const std::string metric_;
  const bool maximize_;
  std::string cursor_;  // empty: read everything
  json best_;
  double best_value_ = 0;
};

// GET .../best, or null for its 404: no trial completed or reported the
// objective yet. The experiment is known to exist.
json BestOrNull(const HttpClientOptions& o, int64_t id) {
  const std::string target = "/api/v1/experiments/" + std::to_string(id) + "/best";
  auto r = hpo::HttpRequestOnce(o, "GET", target);
  if (r.ok() && r->status == 404) return json();
  // Any other failure: Call asks again and exits with the server's message.
  return r.ok() && r->status == 200 ? json::parse(r->body, nullptr, false) : Call(o, "GET", target);
}

// A best trial from GET .../best in one line: "trial 3 (mlp): accuracy 0.91",
// or, when no trial completed, "best so far: trial 3 (mlp; paused, best at
// step 3, not trained to its full budget): accuracy 0.916".
std::string BestLine(const json& b, const std::string& metric) {
  const bool partial = b.value("partial", false);
  const json& metrics = partial ? b["best_metrics"] : b["final_metrics"];
  std::string where = Str(b["space"]);
  if (partial) {
    where += "; " + Str(b["state"]) + ", best at step " + Str(b["best_step"]) + ", not trained to its full budget";
    if (b["checkpoint_step"].is_number()) where += "; checkpoint of step " + Str(b["checkpoint_step"]) + " kept";
  }
  return std::string(partial ? "best so far: " : "") + "trial " + Str(b["number"]) + " (" + where + "): " + metric +
         " " + Str(metrics.is_object() ? metrics.value(metric, json()) : json());
}

// The watch view: progress against the budget, the best so far, elapsed and
// ETA. Redrawn in place on a terminal, one line per change otherwise; with
// "  device time 1m20s, cost 0.42 of budget 5\n" from GET experiment's
// usage; empty before any device time (an ask/tell experiment's trials run
// on the client's machines).
std::string UsageLine(const json& e) {
  const json usage = e.value("usage", json::object());
  const double seconds = usage.value("device_seconds", 0.0);
  const json budget = usage.value("budget", json(nullptr));
  if (seconds <= 0 && budget.is_null()) return "";
  std::string line = "  device time " + Seconds(seconds);
  const double cost = usage.value("cost", 0.0);
  if (cost > 0 || budget.is_number()) {  // no prices, no cost to speak of
    char text[64];
    std::snprintf(text, sizeof text, ", cost %.4g", cost);
    line += text;
  }
  if (budget.is_number()) line += " of budget " + budget.dump();
  return line + "\n";
}

// The watch view's ETA: when the experiment will end, by the budget that ends
// it first, and which budget that is: ", eta 3m10s (trials)", ", eta at most
// 9m50s (wall-time budget)". Empty once the experiment is not running, and
// while no budget bounds it and too few trials are done to tell.
//
// - Wall time: the server ends the experiment at created_ms +
//   max_wall_time_s, so that is a bound, not a guess: "at most".
// - Trials: it ends once its max_trials trials are done. Progress counts a
//   trial that ended or waits paused at a rung as one and a running (or
//   leased) one as half, and the rest is assumed to go at the rate so far:
//   elapsed * (max_trials - progress) / progress. Paused counts as done
//   because promotion-type early stopping leaves most trials paused until the
//   end and then prunes them without running them again; counting only ended
//   trials read "eta 1h06m" ten minutes into a job that ended at 11m23s.
//   Running counts as half because the first max_parallel trials start
//   together: counting them as nothing until they end makes the first
//   estimates far too long. The rate is in wall time, not device time: a
//   trial spends wall time outside its steps too (loading, checkpoints,
//   waiting for a device), and a device-time rate cancels out of a linear
//   extrapolation anyway (device seconds per trial over device seconds per
//   second). Fewer than kMinDone done trials say nothing of how long one
//   takes: no estimate; fewer than kRoughBelow, it is marked rough.
// - Cost (cost.budget): spending is assumed to go on at its rate so far.
std::string Eta(const json& e, double now_s) {
  constexpr int64_t kMinDone = 3;
  constexpr int64_t kRoughBelow = 10;
  if (Str(e["state"]) != "running") return "";
  const json spec = e["spec"].is_object() ? e["spec"] : json::object();
  const json budget = spec.value("budget", json::object());
  const double created_s = e["created_ms"].get<double>() / 1000;
  const double elapsed = std::max(0.0, now_s - created_s);
  std::optional<double> seconds;  // the estimate that ends it first
  std::string why;
  auto consider = [&](double s, const std::string& what) {
    if (!seconds || s < *seconds) {
      seconds = std::max(0.0, s);
      why = what;
    }
  };
  const json& n = e["trials"];
  const int64_t max_trials = budget.value("max_trials", int64_t{100});
  const int64_t done = n.value("completed", int64_t{0}) + n.value("pruned", int64_t{0}) +
                       n.value("failed", int64_t{0}) + n.value("cancelled", int64_t{0}) +
                       n.value("paused", int64_t{0});
  const double progress =
      done + (n.value("running", int64_t{0}) + n.value("leased", int64_t{0})) / 2.0;
  if (done >= kMinDone) {
    std::string what = "trials";
    if (done < kRoughBelow) {
      what += "; rough, " + std::to_string(done) + " of " + std::to_string(max_trials) + " done";
    }
    consider(elapsed * std::max(0.0, max_trials - progress) / progress, what);
  }
  const json usage = e.value("usage", json::object());
  const double cost = usage.value("cost", 0.0);
  if (usage.value("budget", json()).is_number() && cost > 0) {
    consider(elapsed * (usage["budget"].get<double>() - cost) / cost, "cost budget");
  }
  const json wall = budget.value("max_wall_time_s", json());
  if (wall.is_number()) {
    const double left = created_s + wall.get<double>() - now_s;
    if (left <= 0) return ", wall-time budget reached";
    if (!seconds || left <= *seconds)
      return ", eta at most " + Seconds(left) + " (wall-time budget)";
  }
  if (!seconds) return "";
  return ", eta " + Seconds(*seconds) + " (" + why + ")";
}

// What watch and status show of an experiment `e` (GET experiment):
// its state, its trials against the budget, its usage, the best so far
// (`best`: a completed trial, GET .../best's partial best, or null) and,
// last, "elapsed E" with the ETA. `changes` is all but that last line:
// watch writes a new block to a pipe only when it changed.
struct ExperimentView {
  std::string changes;
  std::string text;
};

ExperimentView ViewOf(int64_t id, const json& e, const json& best, double now_s) {
  const json& n = e["trials"];
  const int64_t budget =
      e["spec"].value("budget", json::object()).value("max_trials", int64_t{100});
  const int64_t finished = n.value("completed", 0) + n.value("pruned", 0) + n.value("failed", 0) +
                           n.value("cancelled", 0);
  const double elapsed =
      (e["finished_ms"].is_number() ? e["finished_ms"].get<double>() / 1000 : now_s) -
      e["created_ms"].get<double>() / 1000;
  const std::string metric = e["spec"]["objective"].value("metric", "");
  std::ostringstream view;
  view << "experiment " << id << " (" << Str(e["name"]) << "): " << Str(e["state"]) << "\n";
  view << "  trials " << finished << " of " << budget << " finished: " << n.value("completed", 0)
       << " completed, " << n.value("pruned", 0) << " pruned, "
       << n.value("running", 0) + n.value("leased", 0) << " running, " << n.value("paused", 0)
       << " paused at a rung, " << n.value("failed", 0) << " failed";
  if (n.value("cancelled", 0) > 0) view << ", " << n.value("cancelled", 0) << " cancelled";
  if (n.value("pending", 0) > 0) view << ", " << n.value("pending", 0) << " waiting to start";
  view << "\n" << UsageLine(e);
  if (best.is_null()) {
    view << "  best: none yet\n";
  } else if (best.value("partial", false)) {
    view << "  " << BestLine(best, metric) << " " << Human(best["params"]) << "\n";
  } else {
    view << "  best: trial " << Str(best["number"]) << " (" << Str(best["space"]) << ") " << metric
         << "=" << Str(best["final_metrics"].value(metric, json())) << " " << Human(best["params"])
         << "\n";
  }
  ExperimentView out;
  out.changes = view.str();
  view << "  elapsed " << Seconds(elapsed) << Eta(e, now_s) << "\n";
  out.text = view.str();
  return out;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// hpctl status: the watch view once, and why the experiment ended.
void ShowStatus(const HttpClientOptions& o, int64_t id, const std::string& format) {
  const json e = Call(o, "GET", "/api/v1/experiments/" + std::to_string(id));
  if (format == "json") {
    std::cout << e.dump(2) << "\n";
    return;
  }
  std::cout << ViewOf(id, e, BestOrNull(o, id), NowSeconds()).text;
  if (Str(e["state"]) != "running" && !Str(e["reason"]).empty()) {
    std::cout << "  ended: " << Str(e["reason"]) << "\n";
  }
}

// --quiet, nothing: it waits for the end, and the exit code says how it went.
int Watch(const HttpClientOptions& o, int64_t id, bool quiet_end = false) {
  const bool tty = isatty(STDOUT_FILENO);
  std::string last;
  int drawn_lines = 0;
  std::optional<BestSoFar> best_so_far;
  json partial;  // GET .../best while no trial completed, read every 10 s
  auto partial_read = std::chrono::steady_clock::time_point();
  for (;;) {
    if (g_interrupted) return kInterrupted;
    json e = Call(o, "GET", "/api/v1/experiments/" + std::to_string(id));
    if (!best_so_far) best_so_far.emplace(o, id, e["spec"]["objective"]);
    const json& b = best_so_far->Update();
    const std::string state = Str(e["state"]);
    const std::string metric = e["spec"]["objective"].value("metric", "");
    if (b.is_null()) {
      // None completed: the server's partial best (the best report of any
      // trial), which reads every measurement, so not on every poll.
      const auto now = std::chrono::steady_clock::now();
      if (state != "running" || now - partial_read >= std::chrono::seconds(10)) {
        partial = BestOrNull(o, id);
        partial_read = now;
      }
    }
    const ExperimentView view = ViewOf(id, e, b.is_null() ? partial : b, NowSeconds());
    // Plain output (a pipe, a log) gets a new block only when something but
    // the clock changed.
    if (!g_quiet && tty) {
      if (drawn_lines) std::cout << "\x1b[" << drawn_lines << "F\x1b[J";
      std::cout << view.text << std::flush;
      drawn_lines = static_cast<int>(std::count(view.text.begin(), view.text.end(), '\n'));
    } else if (!g_quiet && view.changes != last) {
      std::cout << view.text << std::flush;
    }
    last = view.changes;
    if (state != "running") {
      if (!quiet_end && !e.value("reason", "").empty()) Info() << "  ended: " << Str(e["reason"]) << "\n";
      if (state != "completed") return kExperimentFailed;
      if (b.is_null() && partial.is_null()) {
        // Not a success: nothing ran far enough to say anything.
        std::fprintf(
            stderr,
            "hpctl: experiment %lld ended with no result: no trial completed or reported %s "
            "(see `hpctl trials %lld` and `hpctl logs %lld/NUMBER`)\n",
            static_cast<long long>(id), metric.c_str(), static_cast<long long>(id),
            static_cast<long long>(id));
        return kNoResult;
      }
      return kOk;
    }
    for (int i = 0; i < 10 && !g_interrupted; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// A spec is YAML unless it is JSON (which is YAML too); say which.
const char* SpecContentType(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  return first != std::string::npos && text[first] == '{' ? "application/json" : "application/yaml";
}

// Prints the id alone under --quiet, so that ID=$(hpctl -q submit FILE) works.
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
  for (const json& w : r.value("warnings", json::array())) std::fprintf(stderr, "hpctl: warning: %s\n", Str(w).c_str());
  if (format == "json") {
    std::cout << spec.dump(2) << "\n";
    return;
  }
  Info() << file << ": a valid spec (dry run: nothing created)\n";
  std::cout << "experiment " << Str(spec["name"]) << ": " << Str(spec["objective"]["direction"]) << " "
            << Str(spec["objective"]["metric"]) << ", sampler " << Str(spec["algorithm"]["sampler"])
            << ", early stopping " << Str(spec["early_stopping"]["rule"]) << " ("
            << Str(spec["early_stopping"]["type"]) << "), placement " << Str(spec["placement"]["policy"]) << "\n";
  auto table = [](const json& params, bool system) {
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
  };
  for (const auto& space : spec["spaces"]) {
    char bits[32];
    std::snprintf(bits, sizeof bits, "%.1f", space.value("complexity_bits", 0.0));
    std::cout << "space " << Str(space["name"]) << " (" << space["params"].size() << " params, complexity " << bits
              << " bits)\n";
    table(space["params"], false);
  }
  json cotuned = json::array();
  for (const auto& p : spec["system"]) {
    if (!p.value("affects_accuracy", false)) cotuned.push_back(p);
  }
  if (!cotuned.empty()) {
    std::cout << "system (tuned inside each trial)\n";
    table(cotuned, true);
  }
  const json& b = spec["budget"];
  std::cout << "budget: " << Str(b["max_trials"]) << " trials, " << Str(b["max_parallel"]) << " at once, "
            << Str(b["steps_per_trial"]) << (b["steps_per_trial"] == 1 ? " step" : " steps") << " per trial"
            << (b["max_wall_time_s"].is_number() ? ", " + Str(b["max_wall_time_s"]) + " s at most" : "") << "\n";
  const json& e = spec["executor"];
  std::cout << "executor: " << Str(e["kind"])
            << (e.contains("trainer") ? " " + Str(e["trainer"]) : "")
            << (e.contains("argv") ? " " + e["argv"].dump() : "") << "\n";
}

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
    json r = Call(o, "GET", "/api/v1/experiments/" + std::to_string(id) + "/trials?limit=" + std::to_string(kPage) +
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
// report by the objective, each with its step, and its device time. As JSON
// its nested params/system/metrics/latest/best objects are what
// pd.json_normalize flattens to the CSV's own column names ("params.lr",
// "metrics.loss", "latest.loss", "best.loss"). The CSV has one column per
// name seen in any trial, sorted within each group, so the columns do not
// depend on which trials ran first. `hpctl export` and `hpctl trials -o
// csv` write the same columns.
const std::vector<std::string> kExportFields = {
    "number",      "id",        "space",  "state",          "attempt",     "level",    "started_ms",
    "finished_ms", "stop_step", "reason", "device_seconds", "latest_step", "best_step"};
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
      for (auto it = rec[group].begin(); it != rec[group].end(); ++it) names[group].insert(it.key());
    }
  }
  std::vector<std::string> header = kExportFields;
  for (const char* group : kExportGroups) {
    for (const auto& k : names[group]) header.push_back(std::string(group) + "." + k);
  }
  WriteCsvRow(out, header);
  for (const auto& rec : records) {
    std::vector<std::string> row;
    for (const auto& f : kExportFields) row.push_back(Cell(rec[f]));
    for (const char* group : kExportGroups) {
      for (const auto& k : names[group]) row.push_back(Cell(rec[group].value(k, json())));
    }
    WriteCsvRow(out, row);
  }
}

// hpctl export: ExportRecords of every trial, as JSON or CSV. The file is
// written beside FILE and renamed, so a failed export leaves no half file.
void Export(const HttpClientOptions& o, int64_t id, const std::string& format,
            const std::string& file) {
  const json records = ExportRecords(AllTrials(o, id));
  std::ostringstream out;
  if (format == "json") {
    out << records.dump(2) << "\n";
  } else {
    WriteExportCsv(out, records);
  }
  if (file.empty() || file == "-") {
    std::cout << out.str() << std::flush;
    return;
  }
  namespace fs = std::filesystem;
  const std::string tmp = file + ".tmp-" + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << out.str();
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
  Info() << "wrote " << records.size() << " trials of experiment " << id << " to " << file << " (" << format
         << ")\n";
}

// hpctl trials: a table with the metrics and params as short JSON, CSV with
// the export's flat columns (params.x, system.threads, metrics.loss), or
// the server's JSON.
void Trials(const HttpClientOptions& o, int64_t id, const std::string& state,
            const std::string& format) {
  std::string target = "/api/v1/experiments/" + std::to_string(id) + "/trials?limit=10000";
  if (!state.empty()) target += "&state=" + state;
  json r = Call(o, "GET", target);
  if (format == "csv") {
    WriteExportCsv(std::cout, ExportRecords(r["trials"]));
    return;
  }
  const json e = Call(o, "GET", "/api/v1/experiments/" + std::to_string(id));
  const std::string metric = Str(e["spec"]["objective"]["metric"]);
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : r["trials"]) {
    const double trained = t.value("device_seconds", 0.0);
    rows.push_back({Str(t["number"]), Str(t["id"]), Str(t["space"]), Str(t["state"]),
                    MetricsCell(t), BestCell(t, metric), trained > 0 ? Seconds(trained) : "",
                    Human(t["params"]), Human(t["system"])});
  }
  PrintRows({"number", "id", "space", "state", "metrics", "best_" + metric, "train_time", "params",
             "system"},
            rows, format, r["trials"]);
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
  const json r = Call(o, "GET",
                      "/api/v1/experiments/" + std::to_string(experiment) +
                          "/trials?limit=1&after=" + std::to_string(number - 1));
  if (r["trials"].empty() || r["trials"][0]["number"] != number) {
    Fail(kServerError, "experiment " + std::to_string(experiment) + " has no trial " +
                           std::to_string(number) + " (`hpctl trials " +
                           std::to_string(experiment) + "` lists them)");
  }
  return r["trials"][0]["id"].get<int64_t>();
}

// Shell completion ----------------------------------------------------------
// The scripts are written from the CLI11 App itself (its subcommands, their
// options and positionals, their descriptions), so a command or option added
// to main() is completed without anyone editing a list. What the App cannot
// say, the values an option takes, main() records where it declares the
// option (Choices, Path).
struct CompletionHints {
  std::map<const CLI::Option*, std::vector<std::string>> choices;
  std::set<const CLI::Option*> paths;
};

CLI::Option* Choices(CompletionHints& h, CLI::Option* o, const std::vector<std::string>& values,
                     bool check = true) {
  if (check) o->check(CLI::IsMember(values));
  h.choices[o] = values;
  return o;
}
CLI::Option* Path(CompletionHints& h, CLI::Option* o) {
  h.paths.insert(o);
  return o;
}

// Flags (and --help, --version) expect no value.
bool TakesValue(const CLI::Option* o) { return o->get_expected_max() > 0; }

std::vector<std::string> Names(const CLI::Option* o) {
  std::vector<std::string> out;
  for (const auto& s : o->get_snames()) out.push_back("-" + s);
  for (const auto& l : o->get_lnames()) out.push_back("--" + l);
  return out;
}

std::vector<const CLI::App*> Subcommands(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App*) { return true; });
}

std::string Join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

// In single quotes for sh and zsh.
std::string Quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The bash command that completes a value of `o`; ":" (nothing) for a
// value completion cannot know (an id, a count, an address).
std::string BashValues(const CompletionHints& h, const CLI::Option* o) {
  if (auto it = h.choices.find(o); it != h.choices.end()) {
    return "COMPREPLY=($(compgen -W " + Quoted(Join(it->second)) + " -- \"$cur\"))";
  }
  if (h.paths.count(o)) return "COMPREPLY=($(compgen -f -- \"$cur\"))";
  return ":";
}

std::string BashCompletion(const CLI::App& app, const CompletionHints& h) {
  const std::string name = app.get_name();
  std::vector<std::string> globals, global_valued, commands;
  for (const CLI::Option* o : app.get_options()) {
    if (!o->nonpositional()) continue;
    for (const auto& n : Names(o)) {
      globals.push_back(n);
      if (TakesValue(o)) global_valued.push_back(n);
    }
  }
  for (const CLI::App* sub : Subcommands(app)) commands.push_back(sub->get_name());
  std::ostringstream out;
  out << "# bash completion for " << name << ", written by `" << name
      << " completion bash` from its own commands and options.\n"
      << "# Load it with: source <(" << name << " completion bash), or save it as\n"
      << "# ~/.local/share/bash-completion/completions/" << name << "\n"
      << "_" << name << "() {\n"
      << "  local cur=${COMP_WORDS[COMP_CWORD]} prev= sub= i\n"
      << "  ((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD - 1]}\n"
      << "  COMPREPLY=()\n"
      << "  # The command is the first word that names one, skipping the values of global options.\n"
      << "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
      << "    case ${COMP_WORDS[i]} in\n";
  if (!global_valued.empty()) {
    std::string alts;
    for (const auto& n : global_valued) alts += (alts.empty() ? "" : "|") + n;
    out << "      " << alts << ") ((i++)) ;;\n";
  }
  std::string command_alts;
  for (const auto& c : commands) command_alts += (command_alts.empty() ? "" : "|") + c;
  out << "      " << command_alts << ") sub=${COMP_WORDS[i]}; break ;;\n"
      << "    esac\n"
      << "  done\n"
      << "  # The value of an option.\n"
      << "  case \"$sub $prev\" in\n";
  for (const CLI::App* sub : Subcommands(app)) {
    for (const CLI::Option* o : sub->get_options()) {
      if (!o->nonpositional() || !TakesValue(o)) continue;
      for (const auto& n : Names(o)) {
        out << "    " << Quoted(sub->get_name() + " " + n) << ") " << BashValues(h, o) << "; return ;;\n";
      }
    }
  }
  // After the command too: hpctl lets global options follow it (fallthrough).
  for (const CLI::Option* o : app.get_options()) {
    if (!o->nonpositional() || !TakesValue(o)) continue;
    for (const auto& n : Names(o)) out << "    *" << Quoted(" " + n) << ") " << BashValues(h, o) << "; return ;;\n";
  }
  out << "  esac\n"
      << "  if [[ $cur == -* ]]; then\n"
      << "    case $sub in\n"
      << "      '') COMPREPLY=($(compgen -W " << Quoted(Join(globals)) << " -- \"$cur\")) ;;\n";
  for (const CLI::App* sub : Subcommands(app)) {
    std::vector<std::string> words;
    for (const CLI::Option* o : sub->get_options()) {
      if (!o->nonpositional()) continue;
      for (const auto& n : Names(o)) words.push_back(n);
    }
    for (const auto& g : globals) {
      if (std::find(words.begin(), words.end(), g) == words.end()) words.push_back(g);
    }
    out << "      " << sub->get_name() << ") COMPREPLY=($(compgen -W " << Quoted(Join(words)) << " -- \"$cur\")) ;;\n";
  }
  out << "    esac\n"
      << "    return\n"
      << "  fi\n"
      << "  # A command's positional arguments: files, a fixed list, or nothing (ids).\n"
      << "  case $sub in\n"
      << "    '') COMPREPLY=($(compgen -W " << Quoted(Join(commands)) << " -- \"$cur\")) ;;\n";
  for (const CLI::App* sub : Subcommands(app)) {
    std::string values;
    for (const CLI::Option* o : sub->get_options()) {
      if (o->nonpositional()) continue;
      const std::string v = BashValues(h, o);
      if (v != ":" && values.empty()) values = v;
    }
    if (!values.empty()) out << "    " << sub->get_name() << ") " << values << " ;;\n";
  }
  out << "  esac\n"
      << "}\n"
      << "complete -o filenames -F _" << name << " " << name << "\n";
  return out.str();
}

// A description inside a zsh _arguments spec's [...] (and its quotes).
std::string ZshDescription(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '[' || c == ']' || c == '\\') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out;
}

// What follows an option's or positional's name in a zsh spec: ":name:action".
std::string ZshValue(const CompletionHints& h, const CLI::Option* o) {
  // A positional's own name, else the option's long name without dashes.
  std::string label = o->nonpositional() ? "" : o->get_name(true, false);
  if (label.empty() && !o->get_lnames().empty()) label = o->get_lnames().front();
  if (label.empty()) label = "value";
  for (char& c : label) {
    if (c == ':') c = '_';
  }
  if (auto it = h.choices.find(o); it != h.choices.end()) return ":" + label + ":(" + Join(it->second) + ")";
  if (h.paths.count(o)) return ":" + label + ":_files";
  return ":" + label + ": ";
}

// The _arguments specs of one App's options and positionals, less those
// named as an option of `parent` (each command's --help is the app's too).
std::vector<std::string> ZshSpecs(const CLI::App& app, const CompletionHints& h, const CLI::App* parent = nullptr) {
  std::set<std::string> inherited;
  if (parent) {
    for (const CLI::Option* o : parent->get_options()) {
      for (const auto& n : Names(o)) inherited.insert(n);
    }
  }
  std::vector<std::string> specs;
  for (const CLI::Option* o : app.get_options()) {
    if (o->nonpositional() && inherited.count(Names(o).front())) continue;
    const std::string desc = "[" + ZshDescription(o->get_description()) + "]";
    if (o->nonpositional()) {
      const auto names = Names(o);
      std::string exclusive = "(" + Join(names) + ")";
      for (const auto& n : names) {
        specs.push_back(Quoted(exclusive + n + desc + (TakesValue(o) ? ZshValue(h, o) : "")));
      }
    } else {
      specs.push_back(Quoted((o->get_required() ? "" : ":") + ZshValue(h, o)));
    }
  }
  return specs;
}

std::string ZshCompletion(const CLI::App& app, const CompletionHints& h) {
  const std::string name = app.get_name();
  std::ostringstream out;
  out << "#compdef " << name << "\n"
      << "# zsh completion for " << name << ", written by `" << name
      << " completion zsh` from its own commands and options.\n"
      << "# Load it with: source <(" << name << " completion zsh) after compinit, or save it as _" << name
      << " in a directory of $fpath.\n"
      << "_" << name << "() {\n"
      << "  local curcontext=$curcontext state line ret=1\n"
      << "  local -a globals\n"
      << "  globals=(\n";
  for (const auto& spec : ZshSpecs(app, h)) out << "    " << spec << "\n";
  out << "  )\n"
      << "  _arguments -C $globals ':command:->command' '*::argument:->argument' && ret=0\n"
      << "  case $state in\n"
      << "    command)\n"
      << "      local -a commands\n"
      << "      commands=(\n";
  for (const CLI::App* sub : Subcommands(app)) {
    out << "        " << Quoted(sub->get_name() + ":" + sub->get_description()) << "\n";
  }
  out << "      )\n"
      << "      _describe -t commands '" << name << " command' commands && ret=0 ;;\n"
      << "    argument)\n"
      << "      case $line[1] in\n";
  for (const CLI::App* sub : Subcommands(app)) {
    out << "        " << sub->get_name() << ") _arguments $globals";
    for (const auto& spec : ZshSpecs(*sub, h, &app)) out << " \\\n            " << spec;
    out << " && ret=0 ;;\n";
  }
  out << "      esac ;;\n"
      << "  esac\n"
      << "  return ret\n"
      << "}\n"
      << "# Autoloaded from $fpath, this file is the completion function's body; sourced, it registers it.\n"
      << "if [[ $zsh_eval_context[-1] == loadautofunc ]]; then\n"
      << "  _" << name << " \"$@\"\n"
      << "else\n"
      << "  compdef _" << name << " " << name << "\n"
      << "fi\n";
  return out.str();
}

// hpctl run: an embedded server and N local workers for one experiment.
class Local {
 public:
  ~Local() { Stop(); }
  // `token` reaches the child as HPO_TOKEN: in its environment, which only
  // its user can read, not on its command line, which everyone can.
  pid_t Spawn(const std::vector<std::string>& args, const std::string& log, const std::string& token) {
    const pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);  // Ctrl-C reaches hpctl only; it stops the children in order
      setenv("HPO_TOKEN", token.c_str(), 1);
      unsetenv("HPO_TOKEN_FILE");
      std::vector<char*> argv;
      std::vector<std::string> copy = args;
      for (auto& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      FILE* f = std::fopen(log.c_str(), "a");
      if (f) {
        dup2(fileno(f), 1);
        dup2(fileno(f), 2);
      }
      execv(argv[0], argv.data());
      std::fprintf(stderr, "cannot run %s\n", argv[0]);
      _exit(127);
    }
    pids_.push_back(pid);
    return pid;
  }
  // `pid` exited and was waited for elsewhere: Stop must not signal it (the
  // number may be another process's by then).
  void Reaped(pid_t pid) { pids_.erase(std::remove(pids_.begin(), pids_.end(), pid), pids_.end()); }
  void Stop() {
    // Workers first (they finish or give back their trials), then the server.
    for (auto it = pids_.rbegin(); it != pids_.rend(); ++it) {
      kill(*it, SIGTERM);
      kill(*it, SIGTERM);  // a second TERM abandons running trials: we are done anyway
      waitpid(*it, nullptr, 0);
    }
    pids_.clear();
  }

 private:
  std::vector<pid_t> pids_;
};

std::string FindBinary(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path self = fs::read_symlink("/proc/self/exe").parent_path();
  for (const fs::path& p : {self / name, self.parent_path() / "server" / name, self.parent_path() / "worker" / name}) {
    if (fs::exists(p)) return p.string();
  }
  Fail(kUsage, "cannot find " + name + " next to hpctl (" + self.string() + "); build it first (scripts/setup)");
}

// The cores this process may use: the count hpo-worker reports for its CPU
// (affinity mask and cgroup CPU quota) where hpctl is built with the worker,
// else the affinity mask's.
double UsableCores() {
#ifdef HPO_HAVE_WORKER_INVENTORY
  if (auto cpu = hpo::worker::ReadCpuInventory("/"); cpu.ok()) return cpu->usable_cores;
#endif
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1u, std::thread::hardware_concurrency());
}

// The dashboard's files for the embedded server: `flag` (--web-root or
// HPO_WEB_ROOT) when given, else web/ two levels above this binary
// (build/cli/hpctl in a checkout), else web/ of the source tree it was built
// from. Empty when none holds an index.html.
std::string FindWebRoot(const std::string& flag) {
  namespace fs = std::filesystem;
  if (!flag.empty()) {
    if (!fs::is_regular_file(fs::path(flag) / "index.html")) {
      Fail(kUsage, "--web-root " + flag + ": no index.html there (the dashboard is the repository's web/ folder)");
    }
    return fs::absolute(flag).string();
  }
  const fs::path self = fs::read_symlink("/proc/self/exe").parent_path();
  for (const fs::path& p : {self.parent_path().parent_path() / "web", fs::path(HPO_SOURCE_WEB_DIR)}) {
    if (fs::is_regular_file(p / "index.html")) return fs::weakly_canonical(p).string();
  }
  return "";
}

// Replaces `path` with a new file of mode 0600 holding `secret`. The file is
// written under a fresh name in the same directory (mkstemp: O_EXCL, so never
// through a symlink, and 0600 whatever the umask) and renamed over `path`:
// an existing file keeps neither its old mode (0644 from an earlier version,
// say) nor its inode, and a symlink at `path` is replaced, its target untouched.
void WriteSecretFile(const std::string& path, const std::string& secret) {
  std::string temp = path + ".XXXXXX";
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) Fail(kUsage, "cannot write " + path + ": " + std::strerror(errno));
  const bool written = ::write(fd, secret.data(), secret.size()) == static_cast<ssize_t>(secret.size());
  int error = written ? 0 : (errno != 0 ? errno : EIO);  // a short write sets no errno
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error == 0 && ::rename(temp.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    ::unlink(temp.c_str());
    Fail(kUsage, "cannot write " + path + ": " + std::strerror(error));
  }
}

int Run(const std::string& file, int workers, const std::string& data_dir, const std::string& web_root_flag) {
  namespace fs = std::filesystem;
  const std::string spec = ReadFile(file);  // fail early on a missing file
  const std::string web_root = FindWebRoot(web_root_flag);
  fs::create_directories(data_dir);
  const std::string ports = data_dir + "/ports.json";
  fs::remove(ports);
  // The embedded server is on loopback, but any local user, and any web
  // page the user opens, can reach loopback: it gets a fresh token, which
  // hpctl, the workers and the dashboard link carry.
  auto token = hpo::RandomToken();
  if (!token.ok()) Fail(kUsage, token.status().message());
  // For other clients meanwhile: HPO_TOKEN=$(cat DATA_DIR/token) hpctl ...
  const std::string token_file = data_dir + "/token";
  WriteSecretFile(token_file, *token);
  Local local;
  std::vector<std::string> server = {FindBinary("hpo-server"), "--store",
                                     "sqlite://" + fs::absolute(data_dir).string() + "/hpo.db", "--http",
                                     "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--port-file", ports};
  if (!web_root.empty()) server.insert(server.end(), {"--web-root", web_root});
  const pid_t server_pid = local.Spawn(server, data_dir + "/server.log", *token);
  auto listening = hpo::WaitForServerPorts(ports, server_pid, std::chrono::seconds(10));
  if (listening.status().code() == hpo::StatusCode::kUnavailable) local.Reaped(server_pid);
  if (!listening.ok()) Fail(kUnreachable, "the embedded hpo-server did not start; see " + data_dir + "/server.log");
  HttpClientOptions o;
  o.port = listening->http;
  o.token = *token;
  const std::string grpc = "127.0.0.1:" + std::to_string(listening->grpc);
  const int64_t id = Submit(o, file);
  (void)spec;
  // Each worker would take every usable core for its CPU trials, so N of
  // them would run N trials at full width side by side: each gets its share
  // (hpo-worker --threads caps the cores it reports, and the server keeps a
  // trial's `threads` within them).
  const double cores = UsableCores();
  const int threads = std::max(1, static_cast<int>(cores / workers));
  for (int i = 0; i < workers; ++i) {
    local.Spawn({FindBinary("hpo-worker"), "--server", grpc, "--threads", std::to_string(threads)},
                data_dir + "/worker-" + std::to_string(i) + ".log", *token);
  }
  char usable[32];
  std::snprintf(usable, sizeof usable, "%g", cores);
  Info() << workers << (workers == 1 ? " worker" : " workers") << " on " << usable
         << " usable cores: " << threads << (threads == 1 ? " thread" : " threads")
         << (workers == 1 ? "" : " each") << " for CPU trials (hpo-worker --threads " << threads
         << ")"
         << (workers > 1 && threads * workers > cores
                 ? "; more workers than cores, so they share them"
                 : "")
         << "\n";
  if (web_root.empty()) {
    Info() << "dashboard: none (no web/ folder found; pass --web-root DIR); REST on http://127.0.0.1:" << o.port
           << "/api/v1 with the token in " << token_file << "  (logs in " << data_dir << ")\n";
  } else {
    // The page stores the token and drops it from the address bar (web/js/api.js).
    Info() << "dashboard: http://127.0.0.1:" << o.port << "/?token=" << *token << "  (logs in " << data_dir << ")\n";
    if (!fs::exists(fs::path(web_root) / "node_modules" / "echarts")) {
      Info() << "  its charts need `npm ci` in " << web_root << " (scripts/setup runs it)\n";
    }
  }
  const int rc = Watch(o, id);
  if (rc == kInterrupted) {
    Info() << "\ninterrupted: cancelling experiment " << id << "\n";
    auto r = hpo::HttpRequestOnce(o, "POST", "/api/v1/experiments/" + std::to_string(id) + ":cancel", "{}");
    (void)r;
  }
  auto best = hpo::HttpRequestOnce(o, "GET", "/api/v1/experiments/" + std::to_string(id) + "/best");
  if (best.ok() && best->status == 200) {
    json b = json::parse(best->body);
    const bool partial = b.value("partial", false);
    std::cout << (partial ? "best so far: trial " : "best trial ") << Str(b["number"]) << " (space "
              << Str(b["space"])
              << (partial ? "; " + Str(b["state"]) + ", best at step " + Str(b["best_step"]) +
                                ", not trained to its full budget"
                          : "")
              << "): " << Human(b[partial ? "best_metrics" : "final_metrics"]) << "\n  params "
              << Human(b["params"]) << "\n  system " << Human(b["system"]) << "\n";
  }
  Info() << "stopping workers and server...\n";
  local.Stop();
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hpctl: submit and watch HeteroTune experiments", "hpctl"};
  app.set_version_flag("--version", "hpctl 0.1.0");
  app.require_subcommand(1);
  // Global options may also follow the command (hpctl export 3 -o csv --quiet).
  app.fallthrough();
  CompletionHints hints;
  std::string server = "127.0.0.1:8080";
  // Its variable is read after parsing (common/cli_env.h): HPO_SERVER, the
  // name it had before, is still read, with a warning.
  auto* server_opt = app.add_option("--server", server,
                                    "hpo-server's REST address, HOST:PORT (https://HOST:PORT for "
                                    "HTTPS) (env: HPO_REST_SERVER)")
                         ->capture_default_str();
  std::string tls_ca;
  Path(hints, app.add_option("--tls-ca", tls_ca,
                             "PEM CA certificate(s) that signed the server's (HTTPS; default: the system's)"))
      ->envname("HPO_TLS_CA");
  app.add_flag("-q,--quiet", g_quiet, "print only the data asked for and errors, no progress or news");
  std::string file, format = "table", state, data_dir = "./hpo-data";
  int64_t id = 0;
  bool watch = false, dry_run = false;
  int workers = 2;
  auto* submit = app.add_subcommand("submit", "submit an experiment spec (YAML or JSON)");
  Path(hints, submit->add_option("file", file, "the spec file"))->required();
  auto* watch_flag = submit->add_flag("--watch", watch, "then watch it");
  submit->add_flag("--dry-run", dry_run, "check the spec on the server and print it as parsed; create nothing")
      ->excludes(watch_flag);
  Choices(hints, submit->add_option("-o,--output", format, "--dry-run's output: table or json"), {"table", "json"});
  app.add_subcommand("list", "list experiments");
  auto* status = app.add_subcommand(
      "status", "an experiment's state, trial counts, best trial so far, elapsed time and ETA");
  status->add_option("id", id)->required();
  Choices(hints, status->add_option("-o,--output", format, "table or json"), {"table", "json"});
  auto* watch_cmd = app.add_subcommand(
      "watch",
      "a live view of an experiment, until it ends; exit code 0 it completed with a result, 4 it failed or was "
      "cancelled, 5 it completed with no result (no trial completed or reported the objective)");
  watch_cmd->add_option("id", id)->required();
  auto* trials = app.add_subcommand("trials", "list an experiment's trials");
  trials->add_option("id", id)->required();
  // The server judges the state (and names the field); the list is for completion.
  Choices(hints,
          trials->add_option("--state", state,
                             "pending, leased, running, paused, completed, pruned, failed or cancelled"),
          {"pending", "leased", "running", "paused", "completed", "pruned", "failed", "cancelled"}, false);
  Choices(hints, trials->add_option("-o,--output", format, "table, json or csv"), {"table", "json", "csv"});
  auto* export_cmd = app.add_subcommand("export", "every trial with params and final metrics, as CSV or JSON");
  export_cmd->add_option("id", id)->required();
  std::string export_file;
  Path(hints, export_cmd->add_option("file", export_file, "where to write it (default: stdout)"));
  std::string export_format = "csv";
  Choices(hints, export_cmd->add_option("-o,--output", export_format, "csv or json")->capture_default_str(),
          {"csv", "json"});
  auto* best = app.add_subcommand(
      "best", "the best completed trial; while none completed, the best reported one, marked \"best so far\"");
  best->add_option("id", id)->required();
  Choices(hints, best->add_option("-o,--output", format, "table or json"), {"table", "json"});
  auto* cancel = app.add_subcommand("cancel", "cancel an experiment");
  cancel->add_option("id", id)->required();
  auto* workers_cmd = app.add_subcommand("workers", "workers, their devices and measured speed");
  Choices(hints, workers_cmd->add_option("-o,--output", format, "table or json"), {"table", "json"});
  auto* logs = app.add_subcommand("logs", "a trial's measurements and its reason/log tail");
  std::string trial_ref;
  logs->add_option(
          "trial", trial_ref,
          "EXPERIMENT/NUMBER (3/25: trial 25 of experiment 3), or the trial's id as the REST API "
          "and `hpctl trials` show it")
      ->required();
  auto* run = app.add_subcommand("run", "run an experiment on this machine: embedded server, local workers");
  Path(hints, run->add_option("file", file, "the spec file"))->required();
  run->add_option("--workers", workers,
                  "local workers; each gets its share of this machine's cores")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  Path(hints, run->add_option("--data-dir", data_dir, "where the SQLite store and logs go"))->capture_default_str();
  std::string web_root;
  Path(hints, run->add_option("--web-root", web_root, "the dashboard's files (default: this checkout's web/)"))
      ->envname("HPO_WEB_ROOT");
  auto* completion = app.add_subcommand("completion", "print a shell completion script: bash or zsh");
  std::string shell;
  Choices(hints, completion->add_option("shell", shell, "bash or zsh"), {"bash", "zsh"})->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kUsage;
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  try {
    if (completion->parsed()) {
      std::cout << (shell == "bash" ? BashCompletion(app, hints) : ZshCompletion(app, hints));
      return kOk;
    }
    if (run->parsed()) return Run(file, workers, data_dir, web_root);
    if (server_opt->count() == 0) {
      const std::string from_environment =
          hpo::RenamedVariable("hpctl", "HPO_REST_SERVER", "HPO_SERVER",
                               "hpctl reads it as the REST address, hpo-worker as the gRPC one");
      if (!from_environment.empty()) server = from_environment;
    }
    auto parsed = hpo::ParseServerAddress(server);
    if (!parsed.ok()) Fail(kUsage, parsed.status().message());
    HttpClientOptions o = *parsed;
    if (const char* t = std::getenv("HPO_TOKEN")) o.token = t;
    if (!tls_ca.empty()) {
      if (!o.tls) Fail(kUsage, "--tls-ca needs an https:// --server");
      o.tls_ca_file = tls_ca;
    }
    const std::string eid = std::to_string(id);
    if (submit->parsed()) {
      if (dry_run) {
        DryRun(o, file, format);
        return kOk;
      }
      if (format != "table") Fail(kUsage, "--output " + format + ": only for --dry-run (submit prints the new id)");
      const int64_t created = Submit(o, file);
      return watch ? Watch(o, created) : kOk;
    }
    if (app.got_subcommand("list")) {
      json r = Call(o, "GET", "/api/v1/experiments?limit=1000");
      std::vector<std::vector<std::string>> rows;
      for (const auto& e : r["experiments"]) {
        rows.push_back({Str(e["id"]), Str(e["name"]), Str(e["state"]), Str(e["trials"]["completed"]),
                        Str(e["trials"]["total"]), Str(e["reason"])});
      }
      PrintRows({"id", "name", "state", "completed", "trials", "reason"}, rows, "table", r);
      return kOk;
    }
    if (status->parsed()) {
      ShowStatus(o, id, format);
      return kOk;
    }
    if (watch_cmd->parsed()) return Watch(o, id);
    if (trials->parsed()) {
      Trials(o, id, state, format);
      return kOk;
    }
    if (export_cmd->parsed()) {
      Export(o, id, export_format, export_file);
      return kOk;
    }
    if (best->parsed()) {
      json b = Call(o, "GET", "/api/v1/experiments/" + eid + "/best");
      if (format == "json") {
        std::cout << b.dump(2) << "\n";
      } else if (b.value("partial", false)) {
        // No trial completed: the best report of any, said to be partial.
        const json e = Call(o, "GET", "/api/v1/experiments/" + eid);
        std::cout << BestLine(b, e["spec"]["objective"].value("metric", "")) << "\n  id      "
                  << Str(b["id"]) << "\n  metrics " << Human(b["best_metrics"]) << " (step "
                  << Str(b["best_step"]) << ")\n  params  " << Human(b["params"]) << "\n  system  "
                  << Human(b["system"]) << "\n";
      } else {
        std::cout << "trial " << Str(b["number"]) << " (id " << Str(b["id"]) << ", space "
                  << Str(b["space"]) << ")\n  metrics " << Human(b["final_metrics"])
                  << "\n  params  " << Human(b["params"]) << "\n  system  " << Human(b["system"])
                  << "\n";
      }
      return kOk;
    }
    if (cancel->parsed()) {
      Call(o, "POST", "/api/v1/experiments/" + eid + ":cancel", "{}");
      Info() << "cancelled experiment " << eid << "\n";
      return kOk;
    }
    if (workers_cmd->parsed()) {
      json r = Call(o, "GET", "/api/v1/workers");
      std::vector<std::vector<std::string>> rows;
      for (const auto& w : r["workers"]) {
        std::string running;
        for (const auto& t : w.value("current_trials", json::array())) {
          running += (running.empty() ? "" : " ") + Str(t["experiment_id"]) + "/" +
                     Str(t["number"]) + " (" + Str(t["state"]) + ")";
        }
        for (const auto& d : w["devices"]) {
          std::string speed;
          for (const auto& m : d["measured"]) speed += (speed.empty() ? "" : " ") + Str(m["workload"]) + "=" + Str(m["samples_per_sec"]);
          rows.push_back({Str(w["id"]), Str(w["host"]), Str(d["device_class"]), Str(d["benchmark_gflops"]), speed,
                          running});
        }
      }
      PrintRows(
          {"worker", "host", "device", "gflops", "samples/s", "current trial (experiment/number)"},
          rows, format, r);
      return kOk;
    }
    if (logs->parsed()) {
      const json t = Call(o, "GET", "/api/v1/trials/" + std::to_string(TrialId(o, trial_ref)));
      // attempt: the leases of the trial's current (or last) segment; 0
      // only before its first lease.
      const int64_t attempt = t.value("attempt", int64_t{0});
      std::cout << "trial " << Str(t["number"]) << " of experiment " << Str(t["experiment_id"])
                << " (id " << Str(t["id"]) << "): " << Str(t["state"])
                << (attempt > 0 ? ", attempt " + std::to_string(attempt) : ", not leased yet")
                << "\n";
      for (const auto& m : t["measurements"]) {
        std::cout << "  step " << Str(m["step"]) << " " << Human(m["metrics"])
                  << " samples/s=" << Str(m["samples_per_sec"]) << " system=" << Human(m["system"])
                  << "\n";
      }
      if (!Str(t["reason"]).empty()) std::cout << Str(t["reason"]) << "\n";
      return kOk;
    }
  } catch (const Failure& f) {
    std::fprintf(stderr, "hpctl: %s\n", f.message.c_str());
    return f.code;
  }
  return kUsage;
}
