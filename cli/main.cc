// hpctl: the HeteroTune command line, over the REST API only.
//
// Exit codes: 0 success; 1 the server answered with an error (the message
// is printed); 2 bad usage or a bad local file; 3 the server cannot be
// reached; 4 an experiment ended without success (watch/run: failed or
// cancelled); 130 interrupted (Ctrl-C).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/http_client.h"
#include "common/token.h"

namespace {

using nlohmann::json;
using hpo::HttpClientOptions;

enum Exit { kOk = 0, kServerError = 1, kUsage = 2, kUnreachable = 3, kExperimentFailed = 4, kInterrupted = 130 };

std::atomic<bool> g_interrupted{false};
void OnSignal(int) { g_interrupted = true; }

struct Failure {
  int code;
  std::string message;
};

[[noreturn]] void Fail(int code, const std::string& message) { throw Failure{code, message}; }

json Call(const HttpClientOptions& o, const std::string& method, const std::string& target,
          const std::string& body = "", const std::string& content_type = "application/json") {
  auto r = hpo::HttpRequestOnce(o, method, target, body, content_type);
  if (!r.ok()) {
    Fail(kUnreachable, r.status().message() + " (is hpo-server running? set --server or HPO_SERVER)");
  }
  json j = json::parse(r->body, nullptr, false);
  if (r->status >= 400) {
    const std::string msg = j.is_object() && j.contains("error") ? j["error"].value("message", r->body) : r->body;
    Fail(kServerError, msg);
  }
  return j;
}

std::string Str(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  if (v.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", v.get<double>());
    return buf;
  }
  return v.dump();
}

// Rows of cells as an aligned table, CSV or JSON.
void PrintRows(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
               const std::string& format, const json& raw) {
  if (format == "json") {
    std::cout << raw.dump(2) << "\n";
    return;
  }
  if (format == "csv") {
    auto esc = [](const std::string& s) {
      if (s.find_first_of(",\"\n") == std::string::npos) return s;
      std::string out = "\"";
      for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
      return out + "\"";
    };
    for (size_t i = 0; i < header.size(); ++i) std::cout << (i ? "," : "") << esc(header[i]);
    std::cout << "\n";
    for (const auto& r : rows) {
      for (size_t i = 0; i < r.size(); ++i) std::cout << (i ? "," : "") << esc(r[i]);
      std::cout << "\n";
    }
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

// The watch view: progress against the budget, the best so far, elapsed and
// ETA. Redrawn in place on a terminal, one line per change otherwise.
int Watch(const HttpClientOptions& o, int64_t id, bool quiet_end = false) {
  const bool tty = isatty(STDOUT_FILENO);
  std::string last;
  int drawn_lines = 0;
  for (;;) {
    if (g_interrupted) return kInterrupted;
    json e = Call(o, "GET", "/api/v1/experiments/" + std::to_string(id));
    const json& n = e["trials"];
    const int64_t budget = e["spec"].value("budget", json::object()).value("max_trials", int64_t{100});
    const int64_t finished = n.value("completed", 0) + n.value("pruned", 0) + n.value("failed", 0) +
                             n.value("cancelled", 0);
    const double now_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const double elapsed = (e["finished_ms"].is_number() ? e["finished_ms"].get<double>() / 1000 : now_s) -
                           e["created_ms"].get<double>() / 1000;
    const double eta = finished > 0 && finished < budget ? elapsed / finished * (budget - finished) : 0;
    std::ostringstream view;
    view << "experiment " << id << " (" << Str(e["name"]) << "): " << Str(e["state"]) << "\n";
    view << "  trials " << finished << "/" << budget << ": " << n.value("completed", 0) << " completed, "
         << n.value("pruned", 0) << " pruned, " << n.value("running", 0) + n.value("leased", 0) << " running, "
         << n.value("paused", 0) << " paused at a rung, " << n.value("failed", 0) << " failed\n";
    auto best = hpo::HttpRequestOnce(o, "GET", "/api/v1/experiments/" + std::to_string(id) + "/best");
    if (best.ok() && best->status == 200) {
      json b = json::parse(best->body, nullptr, false);
      const std::string metric = e["spec"]["objective"].value("metric", "");
      view << "  best: trial " << Str(b["number"]) << " (" << Str(b["space"]) << ") " << metric << "="
           << Str(b["final_metrics"].value(metric, json())) << " " << b["params"].dump() << "\n";
    } else {
      view << "  best: none yet\n";
    }
    // Plain output (a pipe, a log) gets a new block only when something but
    // the clock changed.
    const std::string changes = view.str();
    view << "  elapsed " << Seconds(elapsed) << (eta > 0 ? ", eta " + Seconds(eta) : "") << "\n";
    const std::string text = view.str();
    if (tty) {
      if (drawn_lines) std::cout << "\x1b[" << drawn_lines << "F\x1b[J";
      std::cout << text << std::flush;
      drawn_lines = static_cast<int>(std::count(text.begin(), text.end(), '\n'));
    } else if (changes != last) {
      std::cout << text << std::flush;
    }
    last = changes;
    const std::string state = Str(e["state"]);
    if (state != "running") {
      if (!quiet_end && !e.value("reason", "").empty()) std::cout << "  ended: " << Str(e["reason"]) << "\n";
      return state == "completed" ? kOk : kExperimentFailed;
    }
    for (int i = 0; i < 10 && !g_interrupted; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

int64_t Submit(const HttpClientOptions& o, const std::string& file) {
  // A spec is YAML unless it is JSON (which is YAML too); say which.
  const std::string text = ReadFile(file);
  const auto first = text.find_first_not_of(" \t\r\n");
  const bool is_json = first != std::string::npos && text[first] == '{';
  json r = Call(o, "POST", "/api/v1/experiments", text, is_json ? "application/json" : "application/yaml");
  std::cout << "submitted experiment " << r["id"] << " (" << Str(r["name"]) << ")\n";
  return r["id"].get<int64_t>();
}

void Trials(const HttpClientOptions& o, int64_t id, const std::string& state, const std::string& format) {
  std::string target = "/api/v1/experiments/" + std::to_string(id) + "/trials?limit=10000";
  if (!state.empty()) target += "&state=" + state;
  json r = Call(o, "GET", target);
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : r["trials"]) {
    rows.push_back({Str(t["number"]), Str(t["id"]), Str(t["space"]), Str(t["state"]),
                    t["final_metrics"].is_object() ? t["final_metrics"].dump() : "", t["params"].dump(),
                    t["system"].dump()});
  }
  PrintRows({"number", "id", "space", "state", "metrics", "params", "system"}, rows, format, r["trials"]);
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
  {
    const int fd = ::open(token_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ::write(fd, token->data(), token->size()) != static_cast<ssize_t>(token->size())) {
      Fail(kUsage, "cannot write " + token_file + ": " + std::strerror(errno));
    }
    ::close(fd);
  }
  Local local;
  std::vector<std::string> server = {FindBinary("hpo-server"), "--store",
                                     "sqlite://" + fs::absolute(data_dir).string() + "/hpo.db", "--http",
                                     "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--port-file", ports};
  if (!web_root.empty()) server.insert(server.end(), {"--web-root", web_root});
  local.Spawn(server, data_dir + "/server.log", *token);
  json p;
  for (int i = 0; i < 200 && !p.is_object(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(ports);
    p = json::parse(in, nullptr, false);
    if (p.is_discarded()) p = json();
  }
  if (!p.is_object()) Fail(kUnreachable, "the embedded hpo-server did not start; see " + data_dir + "/server.log");
  HttpClientOptions o;
  o.port = p["http"].get<uint16_t>();
  o.token = *token;
  const std::string grpc = "127.0.0.1:" + std::to_string(p["grpc"].get<int>());
  const int64_t id = Submit(o, file);
  (void)spec;
  for (int i = 0; i < workers; ++i) {
    local.Spawn({FindBinary("hpo-worker"), "--server", grpc}, data_dir + "/worker-" + std::to_string(i) + ".log",
                *token);
  }
  if (web_root.empty()) {
    std::cout << "dashboard: none (no web/ folder found; pass --web-root DIR); REST on http://127.0.0.1:" << o.port
              << "/api/v1 with the token in " << token_file
              << "/api/v1  (logs in " << data_dir << ")\n";
  } else {
    // The page stores the token and drops it from the address bar (web/js/api.js).
    std::cout << "dashboard: http://127.0.0.1:" << o.port << "/?token=" << *token << "  (logs in " << data_dir
              << ")\n";
    if (!fs::exists(fs::path(web_root) / "node_modules" / "echarts")) {
      std::cout << "  its charts need `npm ci` in " << web_root << " (scripts/setup runs it)\n";
    }
  }
  const int rc = Watch(o, id);
  if (rc == kInterrupted) {
    std::cout << "\ninterrupted: cancelling experiment " << id << "\n";
    auto r = hpo::HttpRequestOnce(o, "POST", "/api/v1/experiments/" + std::to_string(id) + ":cancel", "{}");
    (void)r;
  }
  auto best = hpo::HttpRequestOnce(o, "GET", "/api/v1/experiments/" + std::to_string(id) + "/best");
  if (best.ok() && best->status == 200) {
    json b = json::parse(best->body);
    std::cout << "best trial " << Str(b["number"]) << " (space " << Str(b["space"]) << "): " << b["final_metrics"].dump()
              << "\n  params " << b["params"].dump() << "\n  system " << b["system"].dump() << "\n";
  }
  std::cout << "stopping workers and server...\n";
  local.Stop();
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hpctl: submit and watch HeteroTune experiments"};
  app.set_version_flag("--version", "hpctl 0.1.0");
  app.require_subcommand(1);
  std::string server = "127.0.0.1:8080";
  app.add_option("--server", server, "hpo-server's REST address, HOST:PORT (https://HOST:PORT for HTTPS)")
      ->envname("HPO_SERVER")
      ->capture_default_str();
  std::string tls_ca;
  app.add_option("--tls-ca", tls_ca, "PEM CA certificate(s) that signed the server's (HTTPS; default: the system's)")
      ->envname("HPO_TLS_CA");
  std::string file, format = "table", state, data_dir = "./hpo-data";
  int64_t id = 0;
  bool watch = false;
  int workers = 2;
  auto* submit = app.add_subcommand("submit", "submit an experiment spec (YAML or JSON)");
  submit->add_option("file", file, "the spec file")->required();
  submit->add_flag("--watch", watch, "then watch it");
  app.add_subcommand("list", "list experiments");
  auto* status = app.add_subcommand("status", "an experiment's state and trial counts");
  status->add_option("id", id)->required();
  auto* watch_cmd = app.add_subcommand("watch", "a live view of an experiment");
  watch_cmd->add_option("id", id)->required();
  auto* trials = app.add_subcommand("trials", "list an experiment's trials");
  trials->add_option("id", id)->required();
  trials->add_option("--state", state, "pending, leased, running, paused, completed, pruned, failed or cancelled");
  trials->add_option("-o,--output", format, "table, json or csv")->check(CLI::IsMember({"table", "json", "csv"}));
  auto* best = app.add_subcommand("best", "the best completed trial");
  best->add_option("id", id)->required();
  best->add_option("-o,--output", format, "table or json")->check(CLI::IsMember({"table", "json"}));
  auto* cancel = app.add_subcommand("cancel", "cancel an experiment");
  cancel->add_option("id", id)->required();
  auto* workers_cmd = app.add_subcommand("workers", "workers, their devices and measured speed");
  workers_cmd->add_option("-o,--output", format, "table or json")->check(CLI::IsMember({"table", "json"}));
  auto* logs = app.add_subcommand("logs", "a trial's measurements and its reason/log tail");
  logs->add_option("trial", id)->required();
  auto* run = app.add_subcommand("run", "run an experiment on this machine: embedded server, local workers");
  run->add_option("file", file, "the spec file")->required();
  run->add_option("--workers", workers, "local workers")->check(CLI::Range(1, 64))->capture_default_str();
  run->add_option("--data-dir", data_dir, "where the SQLite store and logs go")->capture_default_str();
  std::string web_root;
  run->add_option("--web-root", web_root, "the dashboard's files (default: this checkout's web/)")
      ->envname("HPO_WEB_ROOT");
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
    if (run->parsed()) return Run(file, workers, data_dir, web_root);
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
      json e = Call(o, "GET", "/api/v1/experiments/" + eid);
      std::cout << "experiment " << eid << " (" << Str(e["name"]) << "): " << Str(e["state"])
                << (Str(e["reason"]).empty() ? "" : " - " + Str(e["reason"])) << "\n  trials "
                << e["trials"].dump() << "\n";
      return kOk;
    }
    if (watch_cmd->parsed()) return Watch(o, id);
    if (trials->parsed()) {
      Trials(o, id, state, format);
      return kOk;
    }
    if (best->parsed()) {
      json b = Call(o, "GET", "/api/v1/experiments/" + eid + "/best");
      if (format == "json") {
        std::cout << b.dump(2) << "\n";
      } else {
        std::cout << "trial " << Str(b["number"]) << " (id " << Str(b["id"]) << ", space " << Str(b["space"])
                  << ")\n  metrics " << b["final_metrics"].dump() << "\n  params  " << b["params"].dump()
                  << "\n  system  " << b["system"].dump() << "\n";
      }
      return kOk;
    }
    if (cancel->parsed()) {
      Call(o, "POST", "/api/v1/experiments/" + eid + ":cancel", "{}");
      std::cout << "cancelled experiment " << eid << "\n";
      return kOk;
    }
    if (workers_cmd->parsed()) {
      json r = Call(o, "GET", "/api/v1/workers");
      std::vector<std::vector<std::string>> rows;
      for (const auto& w : r["workers"]) {
        std::string running;
        for (const auto& t : w.value("current_trials", json::array())) {
          running += (running.empty() ? "" : " ") + Str(t["trial_id"]) + " (" + Str(t["state"]) + ")";
        }
        for (const auto& d : w["devices"]) {
          std::string speed;
          for (const auto& m : d["measured"]) speed += (speed.empty() ? "" : " ") + Str(m["workload"]) + "=" + Str(m["samples_per_sec"]);
          rows.push_back({Str(w["id"]), Str(w["host"]), Str(d["device_class"]), Str(d["benchmark_gflops"]), speed,
                          running});
        }
      }
      PrintRows({"worker", "host", "device", "gflops", "samples/s", "current trial"}, rows, format, r);
      return kOk;
    }
    if (logs->parsed()) {
      json t = Call(o, "GET", "/api/v1/trials/" + eid);
      std::cout << "trial " << eid << " (" << Str(t["state"]) << ", attempt " << Str(t["attempt"]) << ")\n";
      for (const auto& m : t["measurements"]) {
        std::cout << "  step " << Str(m["step"]) << " " << m["metrics"].dump() << " samples/s=" << Str(m["samples_per_sec"])
                  << " system=" << m["system"].dump() << "\n";
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
