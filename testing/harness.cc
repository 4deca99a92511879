#include "testing/harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <pqxx/pqxx>
#include <random>
#include <sstream>

#include "common/sha256.h"

namespace hpo::testing {

using nlohmann::json;
namespace fs = std::filesystem;

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  const size_t rank =
      q <= 0 ? 0 : static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  const size_t k = std::min(v.size() - 1, rank);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

// PostgresInstance ----------------------------------------------------------------

namespace {

// Runs argv (as the postgres user when we are root) and waits; its log
// becomes the error message when it fails.
Status RunTool(std::vector<std::string> argv, const std::string& log) {
  if (geteuid() == 0) argv.insert(argv.begin(), {"/usr/sbin/runuser", "-u", "postgres", "--"});
  const pid_t pid = Spawn(argv, log);
  const auto status = WaitExit(pid, std::chrono::seconds(120));
  if (!status) {
    KillAndReap(pid);
    return Status::DeadlineExceeded(argv[geteuid() == 0 ? 4 : 0] + " took over 120 s");
  }
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    return Status::Internal(argv[geteuid() == 0 ? 4 : 0] + " failed: " + ReadFile(log));
  }
  return Status::OK();
}

std::string PostgresBin() {
  std::vector<fs::path> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    if (fs::exists(e.path() / "bin" / "initdb")) found.push_back(e.path() / "bin");
  }
  if (found.empty()) return "";
  // Highest major version: "16" sorts after "15" and before nothing else here.
  std::sort(found.begin(), found.end(), [](const fs::path& a, const fs::path& b) {
    return std::stoi(a.parent_path().filename()) < std::stoi(b.parent_path().filename());
  });
  return found.back().string();
}

}  // namespace

Result<std::unique_ptr<PostgresInstance>> PostgresInstance::Create() {
  std::unique_ptr<PostgresInstance> pg(new PostgresInstance);
  pg->bin_ = PostgresBin();
  if (pg->bin_.empty()) {
    return Status::FailedPrecondition(
        "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin");
  }
  std::string tmpl = "/tmp/hpo-pg-XXXXXX";
  if (!mkdtemp(tmpl.data())) return Status::Internal("mkdtemp " + tmpl + " failed");
  pg->dir_ = tmpl;
  if (geteuid() == 0) {
    const passwd* pw = getpwnam("postgres");
    if (!pw) return Status::FailedPrecondition("running as root, but there is no postgres user");
    if (::chown(pg->dir_.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
      return Status::Internal("chown " + pg->dir_ + " to postgres failed");
    }
  }
  HPO_RETURN_IF_ERROR(RunTool({pg->bin_ + "/initdb", "-D", pg->dir_ + "/data", "-U", "postgres",
                               "--auth=trust", "-E", "UTF8"},
                              pg->dir_ + "/initdb.log"));
  pg->port_ = FreePort();
  HPO_RETURN_IF_ERROR(pg->Start());
  return pg;
}

PostgresInstance::~PostgresInstance() {
  if (started_) (void)PgCtl({"stop", "-m", "immediate"});
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

Status PostgresInstance::PgCtl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {bin_ + "/pg_ctl", "-D", dir_ + "/data", "-w", "-t", "60"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunTool(argv, dir_ + "/pg_ctl.log");
}

Status PostgresInstance::Stop() {
  HPO_RETURN_IF_ERROR(PgCtl({"stop", "-m", "fast"}));
  started_ = false;
  return Status::OK();
}

Status PostgresInstance::Start() {
  HPO_RETURN_IF_ERROR(PgCtl({"-l", dir_ + "/postgres.log", "-o",
                             "-p " + std::to_string(port_) + " -k " + dir_ +
                                 " -c listen_addresses=127.0.0.1 -c max_connections=300",
                             "start"}));
  started_ = true;
  return Status::OK();
}

Status PostgresInstance::CreateDatabase(const std::string& name) {
  return RunTool({bin_ + "/psql", "-h", dir_, "-p", std::to_string(port_), "-U", "postgres", "-d",
                  "postgres", "-v", "ON_ERROR_STOP=1", "-c", "CREATE DATABASE " + name},
                 dir_ + "/psql.log");
}

std::string PostgresInstance::Url(const std::string& db) const {
  return "postgresql://postgres@127.0.0.1:" + std::to_string(port_) + "/" + db;
}

Result<std::string> CreatePostgresDatabase(const std::string& admin_url, const std::string& name) {
  try {
    pqxx::connection admin(admin_url);
    pqxx::nontransaction n(admin);
    n.exec("DROP DATABASE IF EXISTS " + n.quote_name(name) + " WITH (FORCE)");
    n.exec("CREATE DATABASE " + n.quote_name(name));
  } catch (const std::exception& e) {
    return Status::Unavailable("creating database " + name + ": " + e.what());
  }
  // The admin URL with its database replaced: postgresql://user@host:port/db[?options].
  const size_t scheme = admin_url.find("://");
  const size_t slash = admin_url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  const size_t query = admin_url.find('?', slash == std::string::npos ? 0 : slash);
  const std::string base = slash == std::string::npos ? admin_url : admin_url.substr(0, slash);
  return base + "/" + name + (query == std::string::npos ? "" : admin_url.substr(query));
}

Status DropPostgresDatabase(const std::string& admin_url, const std::string& name) {
  try {
    pqxx::connection admin(admin_url);
    pqxx::nontransaction n(admin);
    n.exec("DROP DATABASE IF EXISTS " + n.quote_name(name) + " WITH (FORCE)");
  } catch (const std::exception& e) {
    return Status::Unavailable("dropping database " + name + ": " + e.what());
  }
  return Status::OK();
}

// REST ---------------------------------------------------------------------------

Result<json> RestCall(uint16_t port, const std::string& method, const std::string& target,
                      const std::string& body, std::chrono::milliseconds timeout) {
  HttpClientOptions o;
  o.port = port;
  o.timeout = timeout;
  auto r = HttpRequestOnce(o, method, target, body);
  if (!r.ok()) return r.status();
  if (r->status / 100 != 2) {
    return Status::Internal(method + " " + target + ": HTTP " + std::to_string(r->status) + ": " +
                            r->body);
  }
  json j = json::parse(r->body, nullptr, false);
  if (j.is_discarded()) return Status::Internal(method + " " + target + ": not JSON: " + r->body);
  return j;
}

Result<int64_t> CreateExperiment(uint16_t port, const std::string& spec) {
  HPO_ASSIGN_OR_RETURN(json j, RestCall(port, "POST", "/api/v1/experiments", spec));
  return j.value("id", int64_t{0});
}

// SimWorker ------------------------------------------------------------------------

SimWorker::SimWorker(const std::string& address, std::chrono::milliseconds deadline)
    : deadline_(deadline) {
  grpc::ChannelArguments args;
  // A connection of its own, as a separate worker process would have, and
  // quick reconnects after a server restart. (Not GRPC_ARG_MIN_RECONNECT_
  // BACKOFF_MS: that is the time a connection attempt may take, 20 s by
  // default; at 100 ms, 200 workers connecting at once to a busy server
  // failed with "connection attempt timed out before receiving SETTINGS".)
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  channel_ = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  stub_ = v1::WorkerService::NewStub(channel_);
}

void SimWorker::PauseBeforeRetry(std::chrono::milliseconds d, const std::atomic<bool>* stop) const {
  const auto until = Clock::now() + d;
  const bool connected = channel_->GetState(false) == GRPC_CHANNEL_READY;
  while (Clock::now() < until && !(stop && *stop)) {
    const auto slice =
        std::min<Clock::duration>(until - Clock::now(), std::chrono::milliseconds(20));
    if (connected) {
      std::this_thread::sleep_for(slice);
    } else if (channel_->WaitForConnected(std::chrono::system_clock::now() + slice)) {
      return;
    }
  }
}

void SimWorker::Prepare(grpc::ClientContext& ctx) const {
  ctx.set_deadline(std::chrono::system_clock::now() + deadline_);
}

grpc::Status SimWorker::Register(const std::string& host) {
  v1::RegisterRequest req;
  req.set_host(host);
  auto* dev = req.add_devices();
  dev->set_kind(v1::DEVICE_KIND_CPU);
  dev->set_name("simulated cpu");
  dev->set_cores(1);
  dev->set_benchmark_gflops(10);
  v1::RegisterResponse res;
  grpc::ClientContext ctx;
  Prepare(ctx);
  grpc::Status s = Counted(stub_->Register(&ctx, req, &res));
  if (s.ok()) {
    worker_id_ = res.worker_id();
    device_id_ = res.device_ids(0);
    session_ = res.session();
  }
  return s;
}

grpc::Status SimWorker::Counted(grpc::Status s) {
  if (!s.ok()) listing_.CallFailed();
  return s;
}

grpc::Status SimWorker::Lease(v1::LeaseResponse* out) {
  v1::LeaseRequest req;
  req.set_worker_id(worker_id_);
  req.set_session(session_);
  req.set_device_id(device_id_);
  const HeldListing::Try listing = listing_.Next();
  req.set_lists_held(listing.list);  // none listed: its callers lease only between trials
  grpc::ClientContext ctx;
  Prepare(ctx);
  grpc::Status s = Counted(stub_->Lease(&ctx, req, out));
  if (s.ok()) {
    listing_.WentThrough(listing);
  } else {
    listing_.LeaseFailed();
  }
  return s;
}

grpc::Status SimWorker::Report(int64_t trial_id, int64_t step, double loss,
                               v1::ReportResponse* out) {
  v1::ReportRequest req;
  req.set_worker_id(worker_id_);
  req.set_session(session_);
  req.set_device_id(device_id_);
  req.set_trial_id(trial_id);
  req.set_step(step);
  (*req.mutable_metrics())["loss"] = loss;
  req.set_samples_per_sec(1000);
  grpc::ClientContext ctx;
  Prepare(ctx);
  return Counted(stub_->Report(&ctx, req, out));
}

grpc::Status SimWorker::Complete(int64_t trial_id, double loss) {
  v1::CompleteRequest req;
  req.set_worker_id(worker_id_);
  req.set_session(session_);
  req.set_trial_id(trial_id);
  (*req.mutable_final_metrics())["loss"] = loss;
  v1::CompleteResponse res;
  grpc::ClientContext ctx;
  Prepare(ctx);
  return Counted(stub_->Complete(&ctx, req, &res));
}

grpc::Status SimWorker::Heartbeat(int64_t trial_id, v1::HeartbeatResponse* out) {
  v1::HeartbeatRequest req;
  req.set_worker_id(worker_id_);
  req.set_session(session_);
  req.add_trial_ids(trial_id);
  grpc::ClientContext ctx;
  Prepare(ctx);
  return Counted(stub_->Heartbeat(&ctx, req, out));
}

grpc::Status SimWorker::Pause(int64_t trial_id, int64_t step, bool checkpoint_uploaded) {
  v1::PauseRequest req;
  req.set_worker_id(worker_id_);
  req.set_session(session_);
  req.set_trial_id(trial_id);
  req.set_step(step);
  req.set_checkpoint_uploaded(checkpoint_uploaded);
  v1::PauseResponse res;
  grpc::ClientContext ctx;
  Prepare(ctx);
  return Counted(stub_->Pause(&ctx, req, &res));
}

grpc::Status SimWorker::UploadCheckpoint(int64_t trial_id, int64_t step, const std::string& data,
                                         size_t chunk_bytes, int cut_after_chunks) {
  grpc::ClientContext ctx;
  Prepare(ctx);
  v1::UploadCheckpointResponse res;
  auto writer = stub_->UploadCheckpoint(&ctx, &res);
  int index = 0;
  for (size_t off = 0; off < data.size() || index == 0; off += chunk_bytes, ++index) {
    if (index == cut_after_chunks) {
      // What a kill -9 of the worker does to the stream: the chunks sent so
      // far arrive, the rest never does. The pause lets them get there, so
      // the server holds part of an upload when the stream breaks.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ctx.TryCancel();
      return Counted(writer->Finish());
    }
    v1::CheckpointChunk c;
    if (index == 0) {
      c.set_worker_id(worker_id_);
      c.set_session(session_);
      c.set_trial_id(trial_id);
      c.set_step(step);
      c.set_total_bytes(static_cast<int64_t>(data.size()));
    }
    c.set_data(data.substr(off, chunk_bytes));
    if (off + chunk_bytes >= data.size()) c.set_sha256(Sha256Hex(data));
    if (!writer->Write(c)) break;  // the server ended the call: Finish says why
  }
  writer->WritesDone();
  return Counted(writer->Finish());
}

grpc::Status SimWorker::DownloadCheckpoint(int64_t trial_id, std::string* data, int64_t* step,
                                           std::string* sha256) {
  v1::DownloadCheckpointRequest req;
  req.set_worker_id(worker_id_);
  req.set_session(session_);
  req.set_trial_id(trial_id);
  grpc::ClientContext ctx;
  Prepare(ctx);
  auto reader = stub_->DownloadCheckpoint(&ctx, req);
  data->clear();
  sha256->clear();
  v1::CheckpointChunk c;
  for (bool first = true; reader->Read(&c); first = false) {
    if (first) *step = c.step();
    *data += c.data();
    if (!c.sha256().empty()) *sha256 = c.sha256();
  }
  return Counted(reader->Finish());
}

grpc::Status SimWorker::Restart(int64_t trial_id, const std::string& reason) {
  v1::RestartRequest req;
  req.set_worker_id(worker_id_);
  req.set_session(session_);
  req.set_trial_id(trial_id);
  req.set_reason(reason);
  v1::RestartResponse res;
  grpc::ClientContext ctx;
  Prepare(ctx);
  return Counted(stub_->Restart(&ctx, req, &res));
}

double SimLoss(int64_t trial_id, int64_t step) {
  return static_cast<double>(trial_id) + 1.0 / static_cast<double>(step + 2);
}

const char* SegmentEventName(SegmentEvent e) {
  switch (e) {
    case SegmentEvent::kLeased:
      return "leased";
    case SegmentEvent::kRestarted:
      return "restarted";
    case SegmentEvent::kPaused:
      return "paused";
    case SegmentEvent::kPausedBare:
      return "paused_bare";
    case SegmentEvent::kCompleted:
      return "completed";
    case SegmentEvent::kStopped:
      return "stopped";
  }
  return "?";
}

std::string SimCheckpoint(int64_t trial_id, int64_t step) {
  return "sim-checkpoint trial=" + std::to_string(trial_id) + " step=" + std::to_string(step);
}

// SimFleet --------------------------------------------------------------------------

std::string CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "CODE_" + std::to_string(static_cast<int>(code));
  }
}

SimFleet::SimFleet(FleetOptions options) : options_(std::move(options)) {}

SimFleet::~SimFleet() { Stop(); }

void SimFleet::Start() {
  for (int i = 0; i < options_.workers; ++i) threads_.emplace_back([this, i] { Run(i); });
}

void SimFleet::Stop() {
  stop_ = true;
  for (auto& t : threads_) t.join();
  threads_.clear();
}

FleetStats SimFleet::Snapshot() const {
  std::lock_guard lock(mu_);
  return stats_;
}

bool SimFleet::WaitForReportAfter(Clock::time_point since,
                                  std::chrono::milliseconds timeout) const {
  const auto until = Clock::now() + timeout;
  while (Clock::now() < until) {
    {
      std::lock_guard lock(mu_);
      if (stats_.last_ok > since) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

grpc::Status SimFleet::Timed(const char* what, const std::function<grpc::Status()>& rpc) {
  const auto start = Clock::now();
  grpc::Status s = rpc();
  const double ms = MsSince(start);
  std::lock_guard lock(mu_);
  ++stats_.rpcs;
  stats_.latency_ms.push_back(ms);
  stats_.call_ms[what].push_back(ms);
  if (!s.ok()) {
    ++stats_.errors[CodeName(s.error_code())];
    ++stats_.errors_total;
    stats_.last_error = Clock::now();
    const std::string sample =
        std::string(what) + ": " + CodeName(s.error_code()) + ": " + s.error_message();
    if (stats_.error_samples.size() < 5) stats_.error_samples.push_back(sample);
    stats_.first_error.emplace(CodeName(s.error_code()), sample);
    if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
        s.error_message().find("not leased to") != std::string::npos) {
      ++stats_.refused_not_leased;
    }
  }
  return s;
}

void SimFleet::Count(int64_t FleetStats::*counter) {
  std::lock_guard lock(mu_);
  ++(stats_.*counter);
}

void SimFleet::Acked(int64_t trial_id, int64_t step, double loss) {
  std::lock_guard lock(mu_);
  stats_.acked[trial_id][step] = loss;
  ++stats_.acked_reports;
  stats_.last_ok = Clock::now();
}

void SimFleet::Run(int index) {
  SimWorker w(options_.address, options_.deadline);
  std::mt19937 rng(static_cast<unsigned>(index));
  auto pause = [&](std::chrono::milliseconds d) {
    for (auto until = Clock::now() + d; Clock::now() < until && !stop_;) {
      std::this_thread::sleep_for(
          std::min<std::chrono::milliseconds>(d, std::chrono::milliseconds(20)));
    }
  };
  // Calls `rpc` until it returns something other than a retryable error,
  // as hpo-worker does: a lost race (ABORTED) at most kMaxAbortedAttempts
  // times, the server's absence until it is back.
  auto call = [&](const char* what, const std::function<grpc::Status()>& rpc) {
    for (int aborted = 0;;) {
      grpc::Status s = Timed(what, rpc);
      const Status status = FromGrpcStatus(s);
      if (s.ok() || !IsRetryable(status) || stop_) return s;
      if (status.IsAborted() && ++aborted >= kMaxAbortedAttempts) return s;
      w.PauseBeforeRetry(options_.retry_pause, &stop_);
    }
  };
  if (options_.start_spread.count() > 0) {
    pause(std::chrono::milliseconds(
        std::uniform_int_distribution<int64_t>(0, options_.start_spread.count())(rng)));
  }
  if (!call("register", [&] { return w.Register("sim-" + std::to_string(index)); }).ok()) return;
  while (!stop_) {
    v1::LeaseResponse lease;
    if (!call("lease", [&] { return w.Lease(&lease); }).ok()) {
      pause(options_.retry_pause);
      continue;
    }
    if (!lease.has_trial()) {
      pause(std::chrono::milliseconds(std::max<int64_t>(100, lease.retry_after_ms())));
      continue;
    }
    const v1::Trial& t = lease.trial();
    const int64_t trial = t.trial_id();
    const int64_t segment = next_segment_++;
    auto event = [&](SegmentEvent e, int64_t step) {
      if (options_.on_segment) options_.on_segment(segment, trial, e, step);
    };
    event(SegmentEvent::kLeased, t.resume_step());
    const json params =
        options_.objective ? json::parse(t.params_json(), nullptr, false) : json::object();
    auto loss_at = [&](int64_t step) {
      return options_.objective ? options_.objective(params, step) : SimLoss(trial, step);
    };
    int64_t first = 0;
    if (t.resume_step() > 0) {
      // A promotion: this trial's checkpoint of its rung, or from scratch
      // when it is not usable (what hpo-worker does, worker.proto).
      std::string data, sha;
      int64_t at = -1;
      const grpc::Status s =
          call("download", [&] { return w.DownloadCheckpoint(trial, &data, &at, &sha); });
      std::string wrong;
      if (!s.ok()) {
        wrong = CodeName(s.error_code()) + ": " + s.error_message();
      } else if (at != t.resume_step() || data != SimCheckpoint(trial, t.resume_step())) {
        wrong = "a checkpoint of step " + std::to_string(at) + " that is not the one uploaded";
      }
      if (wrong.empty()) {
        first = t.resume_step() + 1;
        Count(&FleetStats::resumes);
      } else {
        if (!call("restart", [&] { return w.Restart(trial, wrong); }).ok())
          continue;  // not ours any more
        event(SegmentEvent::kRestarted, 0);
        Count(&FleetStats::restarts);
      }
    }
    bool ended = false;
    std::optional<int64_t> paused_at;
    for (int64_t step = first; step < options_.steps && !stop_ && !ended && !paused_at; ++step) {
      pause(options_.step_time);
      if (options_.heartbeat) {
        v1::HeartbeatResponse hb;
        if (call("heartbeat", [&] { return w.Heartbeat(trial, &hb); }).ok() &&
            hb.stop_trial_ids_size() > 0) {
          ended = true;  // stopped by someone else meanwhile
          break;
        }
      }
      const double loss = loss_at(step);
      v1::ReportResponse res;
      grpc::Status s = call("report", [&] { return w.Report(trial, step, loss, &res); });
      if (!s.ok()) {
        ended = true;  // refused: the lease is not ours any more
        break;
      }
      Acked(trial, step, loss);
      if (options_.on_report) options_.on_report(segment, trial, step, loss);
      if (res.decision() == v1::DECISION_PRUNE || res.decision() == v1::DECISION_CANCEL) {
        event(SegmentEvent::kStopped, step);
        ended = true;
      } else if (res.decision() == v1::DECISION_PAUSE) {
        paused_at = step;
      }
    }
    if (paused_at) {
      // The rung's checkpoint, which pauses the trial as it is stored; then
      // Pause (acknowledged also once the trial was promoted meanwhile: the
      // upload already paused it). As hpo-worker does
      // (worker/client.cc, UploadCheckpoint): a few tries, none after a
      // refusal that will not pass (a size over the limit), the lease
      // renewed between them; then the trial pauses without a checkpoint.
      bool uploaded = false;
      for (int attempt = 0; attempt < kCheckpointTransferAttempts && !stop_; ++attempt) {
        if (attempt > 0) {
          w.PauseBeforeRetry(options_.retry_pause, &stop_);
          v1::HeartbeatResponse hb;
          (void)Timed("heartbeat", [&] { return w.Heartbeat(trial, &hb); });
        }
        const grpc::Status s = Timed("upload", [&] {
          return w.UploadCheckpoint(trial, *paused_at, SimCheckpoint(trial, *paused_at), 4096);
        });
        uploaded = s.ok();
        if (s.ok() || !IsRetryable(FromGrpcStatus(s)) ||
            s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
          break;
        }
      }
      const bool paused = call("pause", [&] { return w.Pause(trial, *paused_at, uploaded); }).ok();
      if (uploaded || paused) {
        event(uploaded ? SegmentEvent::kPaused : SegmentEvent::kPausedBare, *paused_at);
        Count(&FleetStats::pauses);
      }
      continue;
    }
    if (ended || stop_) continue;
    const double final_loss = loss_at(options_.steps - 1);
    if (call("complete", [&] { return w.Complete(trial, final_loss); }).ok()) {
      event(SegmentEvent::kCompleted, options_.steps - 1);
      if (options_.on_complete) options_.on_complete(trial, final_loss);
      std::lock_guard lock(mu_);
      ++stats_.trials_completed;
    }
  }
}

// RestLoad ---------------------------------------------------------------------------

RestLoad::RestLoad(RestLoadOptions options) : options_(std::move(options)) {}

RestLoad::~RestLoad() { Stop(); }

void RestLoad::Start() {
  for (int i = 0; i < options_.clients; ++i) threads_.emplace_back([this, i] { Run(i); });
}

void RestLoad::Stop() {
  stop_ = true;
  for (auto& t : threads_) t.join();
  threads_.clear();
}

RestStats RestLoad::Snapshot() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void RestLoad::Run(int index) {
  HttpClientOptions o;
  o.port = options_.port;
  o.timeout = options_.timeout;
  std::mt19937 rng(static_cast<unsigned>(1000 + index));
  std::vector<int64_t> experiments;
  // What the dashboard's pages and hpctl read; one call per turn.
  for (uint64_t turn = static_cast<uint64_t>(index); !stop_; ++turn) {
    std::string target;
    const int64_t e = experiments.empty() ? 0 : experiments[rng() % experiments.size()];
    switch (turn % 7) {
      case 0:
        target = "/api/v1/experiments";
        break;
      case 1:
        target = "/api/v1/workers";
        break;
      case 2:
        target = "/metrics";
        break;
      default:
        if (e == 0) {
          target = "/api/v1/experiments";
        } else if (turn % 7 == 3) {
          target = "/api/v1/experiments/" + std::to_string(e);
        } else if (turn % 7 == 4) {
          target = "/api/v1/experiments/" + std::to_string(e) + "/trials?limit=50";
        } else if (turn % 7 == 5) {
          target = "/api/v1/experiments/" + std::to_string(e) + "/trials?state=completed&limit=50";
        } else {
          target = "/api/v1/experiments/" + std::to_string(e) + "/best";
        }
    }
    const auto start = Clock::now();
    auto r = HttpRequestOnce(o, "GET", target);
    const double ms = MsSince(start);
    std::string error;
    if (!r.ok()) {
      error = std::string(r.status().code() == StatusCode::kDeadlineExceeded ? "DeadlineExceeded"
                                                                             : "Unreachable") +
              ": " + r.status().message();
    } else if (r->status != 200 &&
               !(r->status == 404 && target.find("/best") != std::string::npos)) {
      // 404 from /best: no completed trial yet, an answer, not an error.
      error = std::to_string(r->status) + ": " + r->body.substr(0, 200);
    } else if (target == "/api/v1/experiments") {
      const json j = json::parse(r->body, nullptr, false);
      if (j.is_object() && j.contains("experiments")) {
        experiments.clear();
        for (const auto& x : j["experiments"]) experiments.push_back(x.value("id", int64_t{0}));
      }
    }
    {
      std::lock_guard lock(mu_);
      ++stats_.calls;
      stats_.latency_ms.push_back(ms);
      if (!error.empty()) {
        ++stats_.errors_total;
        ++stats_.errors[error.substr(0, error.find(':'))];
        if (stats_.error_samples.size() < 5)
          stats_.error_samples.push_back(target + " -> " + error);
      }
    }
    if (options_.pause.count() > 0) {
      for (auto until = Clock::now() + options_.pause; Clock::now() < until && !stop_;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }
}

// AskTellClients -----------------------------------------------------------------------

AskTellClients::AskTellClients(AskTellOptions options) : options_(std::move(options)) {}

AskTellClients::~AskTellClients() { Stop(); }

void AskTellClients::Start() {
  for (int i = 0; i < options_.clients; ++i) threads_.emplace_back([this, i] { Run(i); });
}

void AskTellClients::Stop() {
  stop_ = true;
  for (auto& t : threads_) t.join();
  threads_.clear();
}

AskTellStats AskTellClients::Snapshot() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void AskTellClients::Run(int index) {
  (void)index;
  const std::string experiment = "/api/v1/experiments/" + std::to_string(options_.experiment_id);
  // One call, timed and counted; its answer, or nullopt when it failed.
  auto call = [&](const char* what, const std::string& target,
                  const json& body) -> std::optional<json> {
    const auto start = Clock::now();
    auto r = RestCall(options_.port, "POST", target, body.dump(), options_.timeout);
    const double ms = MsSince(start);
    std::lock_guard lock(mu_);
    ++stats_.calls;
    stats_.call_ms[what].push_back(ms);
    if (r.ok()) return std::move(r).value();
    ++stats_.errors_total;
    if (stats_.error_samples.size() < 5)
      stats_.error_samples.push_back(std::string(what) + ": " + r.status().ToString());
    return std::nullopt;
  };
  while (!stop_) {
    auto suggested = call("suggest", experiment + "/trials:suggest", {{"count", 1}});
    if (!suggested) continue;
    const json& trials = (*suggested)["trials"];
    if (!trials.is_array() || trials.empty()) {
      {
        std::lock_guard lock(mu_);
        ++stats_.empty_suggestions;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    const int64_t trial = trials[0].value("id", int64_t{0});
    const json params = trials[0].value("params", json::object());
    const std::string target = "/api/v1/trials/" + std::to_string(trial);
    auto loss_at = [&](int64_t step) {
      return options_.objective ? options_.objective(params, step) : SimLoss(trial, step);
    };
    bool ok = true;
    for (int64_t step = 0; step < options_.steps && ok && !stop_; ++step) {
      auto res = call("report", target + "/measurements",
                      {{"step", step}, {"metrics", {{"loss", loss_at(step)}}}});
      ok = res && res->value("decision", "") == "continue";
    }
    if (!ok || stop_) continue;
    if (call("complete", target + ":complete",
             {{"metrics", {{"loss", loss_at(options_.steps - 1)}}}})) {
      std::lock_guard lock(mu_);
      ++stats_.trials_completed;
    }
  }
}

}  // namespace hpo::testing
