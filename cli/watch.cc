#include "cli/watch.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include "cli/output.h"

namespace hpo::cli {

namespace {

// The best completed trial of an experiment, kept from reads of what changed
// (server: ?since= cursors): the first read pages through every completed
// trial by keyset, later ones ask only for trials completed since the last
// read's cursor, so a poll of an experiment with 10,000 trials reads only its
// news. Ties go to the lower number, as GET .../best. A cursor the server
// refuses (Refusal::kConflict: it is another server's database now) starts a
// full read. With the spec's constraints, a trial outside one (or without
// its metric) is not the best, as GET .../best says.
class BestSoFar {
 public:
  BestSoFar(const HttpClientOptions& o, int64_t id, const json& objective, json constraints)
      : o_(o),
        id_(id),
        metric_(objective.value("metric", "")),
        maximize_(objective.value("direction", "minimize") == "maximize"),
        constraints_(constraints.is_array() ? std::move(constraints) : json::array()) {}

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
      std::string target = ExperimentPath(id_) + "/trials?state=completed&limit=10000";
      if (!after.is_null()) target += "&after=" + after.dump();
      if (!cursor_.empty()) target += "&since=" + cursor_;
      const Answer answer = Ask(o_, "GET", target);
      if (answer.refusal == Refusal::kConflict && !cursor_.empty()) return false;
      const json page = BodyOf(answer);
      if (cursor.empty()) cursor = Str(page["cursor"]);
      for (const json& t : page["trials"]) Consider(t);
      after = page["next_after"];
      if (after.is_null()) break;
    }
    cursor_ = cursor;
    return true;
  }

  bool Feasible(const json& metrics) const {
    for (const json& c : constraints_) {
      const json v = metrics.value(c.value("metric", ""), json());
      if (!v.is_number()) return false;
      const double x = v.get<double>();
      if (c.contains("max") && c["max"].is_number() && x > c["max"].get<double>()) return false;
      if (c.contains("min") && c["min"].is_number() && x < c["min"].get<double>()) return false;
    }
    return true;
  }

  void Consider(const json& t) {
    const json metrics = t.value("final_metrics", json::object());
    if (!metrics.is_object() || !Feasible(metrics)) return;
    const json v = metrics.value(metric_, json());
    if (!v.is_number()) return;
    const double x = v.get<double>();
    const bool better =
        best_.is_null() || (maximize_ ? x > best_value_ : x < best_value_) ||
        (x == best_value_ && t["number"].get<int64_t>() < best_["number"].get<int64_t>());
    if (!better) return;
    best_ = t;
    best_value_ = x;
  }

  const HttpClientOptions& o_;
  const int64_t id_;
  const std::string metric_;
  const bool maximize_;
  const json constraints_;  // the spec's, as written: [{metric, max, min}]
  std::string cursor_;      // empty: read everything
  json best_;
  double best_value_ = 0;
};

// GET .../best, or null when the server finds none (Refusal::kNotFound): no
// trial completed or reported the objective yet. The experiment is known to exist.
json BestOrNull(const HttpClientOptions& o, int64_t id) {
  const Answer answer = Ask(o, "GET", ExperimentPath(id) + "/best");
  if (answer.refusal == Refusal::kNotFound) return json();
  return BodyOf(answer);
}

}  // namespace

std::string BestLine(const json& b, const std::string& metric) {
  const bool partial = b.value("partial", false);
  const json& metrics = partial ? b["best_metrics"] : b["final_metrics"];
  std::string where = Str(b["space"]);
  if (partial) {
    where += "; " + Str(b["state"]) + ", best at step " + Str(b["best_step"]) +
             ", not trained to its full budget";
    if (b["checkpoint_step"].is_number()) {
      where += "; checkpoint of step " + Str(b["checkpoint_step"]) + " kept";
    }
  }
  return std::string(partial ? "best so far: " : "") + "trial " + Str(b["number"]) + " (" + where +
         "): " + metric + " " + Str(metrics.is_object() ? metrics.value(metric, json()) : json());
}

namespace {

// The watch view's usage line, "  device time 1m20s, cost 0.42 of budget 5\n",
// from GET experiment's usage; empty before any device time (an ask/tell experiment's trials run
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
  const std::string metric = FirstObjective(e["spec"]).value("metric", "");
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

// Draws the watch view: in place on a terminal; plain output (a pipe, a
// log) gets a new block only when something but the clock changed;
// nothing under --quiet, which waits for the end for the exit code.
class Screen {
 public:
  void Draw(const ExperimentView& view) {
    if (!g_quiet && tty_) {
      if (drawn_lines_) std::cout << "\x1b[" << drawn_lines_ << "F\x1b[J";
      std::cout << view.text << std::flush;
      drawn_lines_ = static_cast<int>(std::count(view.text.begin(), view.text.end(), '\n'));
    } else if (!g_quiet && view.changes != last_) {
      std::cout << view.text << std::flush;
    }
    last_ = view.changes;
  }

 private:
  const bool tty_ = isatty(STDOUT_FILENO);
  std::string last_;
  int drawn_lines_ = 0;
};

// The best trial watch shows: the best completed one (BestSoFar); while
// none completed, the server's partial best (the best report of any
// trial), which reads every measurement, so not on every poll: every 10 s,
// and once the experiment is not running.
class WatchedBest {
 public:
  WatchedBest(const HttpClientOptions& o, int64_t id) : o_(o), id_(id) {}

  // The best after one more poll of the experiment; null when none yet.
  const json& Update(const json& objective, const json& constraints, const std::string& state) {
    if (!completed_) completed_.emplace(o_, id_, objective, constraints);
    const json& best = completed_->Update();
    if (!best.is_null()) return best;
    const auto now = std::chrono::steady_clock::now();
    if (state != "running" || now - partial_read_ >= std::chrono::seconds(10)) {
      partial_ = BestOrNull(o_, id_);
      partial_read_ = now;
    }
    return partial_;
  }

 private:
  const HttpClientOptions& o_;
  const int64_t id_;
  std::optional<BestSoFar> completed_;
  json partial_;
  std::chrono::steady_clock::time_point partial_read_;
};

// How an experiment that is not running ended, as watch's exit code; says
// why it ended (news) and, for no result, that there is none (an error).
int Ended(int64_t id, const json& e, const json& best, const std::string& metric) {
  if (!e.value("reason", "").empty()) Info() << "  ended: " << Str(e["reason"]) << "\n";
  if (Str(e["state"]) != "completed") return kExperimentFailed;
  if (!best.is_null()) return kOk;
  // Not a success: nothing ran far enough to say anything.
  std::fprintf(stderr,
               "hpctl: experiment %lld ended with no result: no trial completed or reported %s "
               "(see `hpctl trials %lld` and `hpctl logs %lld/NUMBER`)\n",
               static_cast<long long>(id), metric.c_str(), static_cast<long long>(id),
               static_cast<long long>(id));
  return kNoResult;
}

}  // namespace

void ShowStatus(const HttpClientOptions& o, int64_t id, const std::string& format) {
  const json e = Call(o, "GET", ExperimentPath(id));
  if (format == "json") {
    std::cout << e.dump(2) << "\n";
    return;
  }
  std::cout << ViewOf(id, e, BestOrNull(o, id), NowSeconds()).text;
  if (Str(e["state"]) != "running" && !Str(e["reason"]).empty()) {
    std::cout << "  ended: " << Str(e["reason"]) << "\n";
  }
}

int Watch(const HttpClientOptions& o, int64_t id) {
  Screen screen;
  WatchedBest best(o, id);
  for (;;) {
    if (g_interrupted) return kInterrupted;
    json e = Call(o, "GET", ExperimentPath(id));
    const json objective = FirstObjective(e["spec"]);
    const std::string state = Str(e["state"]);
    const json constraints =
        e["spec"].is_object() ? e["spec"].value("constraints", json::array()) : json::array();
    const json& b = best.Update(objective, constraints, state);
    screen.Draw(ViewOf(id, e, b, NowSeconds()));
    if (state != "running") return Ended(id, e, b, objective.value("metric", ""));
    for (int i = 0; i < 10 && !g_interrupted; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

}  // namespace hpo::cli
