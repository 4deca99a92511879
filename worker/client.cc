#include "worker/client.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "common/json_limits.h"
#include "common/mutex.h"
#include "common/sha256.h"
#include "common/thread_annotations.h"
#include "hpo/v1/worker.grpc.pb.h"
#include "proto/grpc_status.h"
#include "proto/held_listing.h"
#include "worker/checkpoint_archive.h"
#include "worker/id_file.h"

namespace hpo::worker {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// The server sent these values within json_limits.h's limits; one beyond
// them (an older server's) is kept as the string it came as.
json ParseOrString(const std::string& s) { return ParseJsonOrString(s, "value").value_or(json(s)); }

// A server certificate this worker does not trust will not become trusted
// by asking again.
bool CertificateRejected(const grpc::Status& s) {
  std::string m = s.error_message();
  for (char& c : m) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return m.find("certificate verify failed") != std::string::npos ||
         m.find("certificate_verify_failed") != std::string::npos;
}

// What a failed call said, for logs and for the reason a trial restarts.
std::string Describe(const grpc::Status& s) {
  static const char* kNames[] = {"OK",
                                 "CANCELLED",
                                 "UNKNOWN",
                                 "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED",
                                 "NOT_FOUND",
                                 "ALREADY_EXISTS",
                                 "PERMISSION_DENIED",
                                 "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION",
                                 "ABORTED",
                                 "OUT_OF_RANGE",
                                 "UNIMPLEMENTED",
                                 "INTERNAL",
                                 "UNAVAILABLE",
                                 "DATA_LOSS",
                                 "UNAUTHENTICATED"};
  const int code = static_cast<int>(s.error_code());
  const std::string name = code >= 0 && code <= 16 ? kNames[code] : std::to_string(code);
  return name + ": " + s.error_message();
}

// How long a Lease with nothing to run may wait on the server for work
// (LeaseRequest.max_wait_ms).
constexpr int64_t kLeaseWaitMs = 2000;
// How long a stopping worker waits for the answer to its Leave (seconds).
constexpr int kLeaveDeadlineS = 3;
// The most data one CheckpointChunk carries (worker.proto).
constexpr size_t kChunkBytes = size_t{1} << 20;

// IsRetryable's rule (common/status.h), but a certificate this worker does
// not trust fails as UNAVAILABLE every time.
bool Retryable(const grpc::Status& s) {
  return !CertificateRejected(s) && IsRetryable(FromGrpcStatus(s));
}

// The pause before a call is made again: 100 ms doubling to at most 1 s, so
// that a fleet is back within about a second of its server, and
// each drawn between half and all of it, so that a fleet that lost its
// server at once does not come back in lockstep. The channel's own
// reconnect backoff (Run) is bounded alike.
constexpr int64_t kFirstRetryMs = 100;
constexpr int64_t kMaxRetryMs = 1000;
// Between registrations refused because the instance is live under another
// secret, which lasts up to the server's lease timeout (a minute by default).
constexpr int64_t kIdentityInUseRetryMs = 5000;

// A trial in the worker's log as users name it, by its number within its
// experiment, with the global id every call uses: "trial 3 of experiment 2
// (id 26)".
std::string TrialName(const TrialRun& run) {
  return "trial " + std::to_string(run.number) + " of experiment " +
         std::to_string(run.experiment_id) + " (id " + std::to_string(run.trial_id) + ")";
}

int64_t Jittered(int64_t ms) {
  thread_local std::minstd_rand rng(std::random_device{}());
  return std::uniform_int_distribution<int64_t>(ms / 2, ms)(rng);
}

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace

struct WorkerClient::Impl {
  WorkerOptions options;
  Executors executors;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::WorkerService::Stub> stub;
  const std::atomic<int>* stop_level = nullptr;
  // Who this worker is to the server: the id and session secret of its
  // registration, and its devices' ids. They change only when registering
  // again.
  struct Identity {
    int64_t worker_id = 0;
    std::string session;
  };
  Mutex register_mu;  // one re-registration at a time
  // The identity secret presented when registering (WorkerOptions::
  // identity_secret at first, then any the server issues).
  std::string identity_secret HPO_GUARDED_BY(register_mu);
  mutable Mutex identity_mu;  // held only to read or replace these
  Identity identity_ HPO_GUARDED_BY(identity_mu);
  std::vector<int64_t> device_ids HPO_GUARDED_BY(identity_mu);
  std::atomic<int64_t> trials_done{0};
  // One Lease call at a time, so that the trials a call lists (held_) are
  // every trial this worker holds: a trial granted to one call is in held_
  // before the next call is made, and the server may end the lease of any
  // other trial it leased to this worker (an answer that never arrived).
  Mutex lease_mu;
  mutable Mutex held_mu;
  std::set<int64_t> held_ HPO_GUARDED_BY(held_mu);
  // Whether a Lease lists held_: on the first, and after any failed call
  // (heartbeats and checkpoint transfers included); proto/held_listing.h
  // says why.
  HeldListing listing_;

  Identity identity() const {
    MutexLock lock(identity_mu);
    return identity_;
  }

  bool Stopping(int level = 1) const { return stop_level->load() >= level; }

  void Prepare(grpc::ClientContext& ctx, int seconds = 30) const {
    if (!options.token.empty()) ctx.AddMetadata("authorization", "Bearer " + options.token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  }

  // Sleeps up to `ms`, waking early when the worker must stop at `level`.
  void Sleep(int64_t ms, int level = 1) const {
    const auto until = Clock::now() + std::chrono::milliseconds(ms);
    while (Clock::now() < until && !Stopping(level))
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  // Sleep's pause before a call is tried again, during which the channel is
  // kept connecting, and which ends early once it is connected. A
  // synchronous client makes progress on a connection attempt only while
  // some thread waits on gRPC; between fail-fast calls that fail at once
  // nobody does, and the new server's accepted connection went unnoticed
  // until gRPC's backup poller ran, every 5 s: the 3-8 s recoveries seen
  // in the fault tests. A call refused while connected (RESOURCE_EXHAUSTED) waits the
  // whole pause.
  void PauseBeforeRetry(int64_t ms, int level) const {
    const auto until = Clock::now() + std::chrono::milliseconds(ms);
    if (channel->GetState(false) == GRPC_CHANNEL_READY) return Sleep(ms, level);
    while (!Stopping(level)) {
      const auto now = Clock::now();
      if (now >= until) return;
      const auto slice = std::min<Clock::duration>(until - now, std::chrono::milliseconds(50));
      if (channel->WaitForConnected(std::chrono::system_clock::now() + slice)) return;
    }
  }

  // Calls `rpc` until it succeeds, fails for good, or the worker stops. A
  // server that is away (UNAVAILABLE, DEADLINE_EXCEEDED) or full
  // (RESOURCE_EXHAUSTED) is waited for as long as it takes; a lost race
  // (ABORTED) is tried kMaxAbortedAttempts times in all. A repeat is
  // harmless: the server keeps one report per (trial, step) and
  // acknowledges a repeated completion or pause; a lease whose answer was
  // lost ends at the next lease call, which lists what this worker holds
  // (every failed try counts in listing_).
  template <typename F>
  grpc::Status WithRetry(const char* what, F rpc, int level = 2) {
    int64_t backoff = kFirstRetryMs;
    for (int aborted = 0;;) {
      grpc::Status s = rpc();
      if (!s.ok()) listing_.CallFailed();
      if (s.ok() || !Retryable(s) || Stopping(level)) return s;
      if (FromGrpcStatus(s).IsAborted() && ++aborted >= kMaxAbortedAttempts) return s;
      const int64_t pause = Jittered(backoff);
      spdlog::warn("{}: {}; retrying in {} ms", what, Describe(s), pause);
      PauseBeforeRetry(pause, level);
      backoff = std::min(backoff * 2, kMaxRetryMs);
    }
  }

  Status Register() HPO_REQUIRES(register_mu) {
    v1::RegisterRequest req;
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    req.set_host(options.host.empty() ? host : options.host);
    req.set_instance(options.instance);
    for (const auto& [k, v] : options.labels) (*req.mutable_labels())[k] = v;
    for (size_t i = 0; i < options.devices.size(); ++i) {
      const DeviceSpec& d = options.devices[i];
      auto* dev = req.add_devices();
      dev->set_ordinal(static_cast<int>(i));
      dev->set_kind(d.device.rfind("cuda", 0) == 0 ? v1::DEVICE_KIND_CUDA : v1::DEVICE_KIND_CPU);
      dev->set_name(d.name);
      dev->set_cores(d.cores);
      dev->set_memory_bytes(d.memory_bytes);
      dev->set_benchmark_gflops(d.benchmark_gflops);
    }
    req.set_version("0.1.0");
    req.set_identity_secret(identity_secret);
    v1::RegisterResponse res;
    grpc::Status s;
    // ALREADY_EXISTS: the instance is live under a secret this worker does
    // not have: most often this very worker, restarted without its secret
    // (an id file from before secrets, or --instance alone), whose old
    // registration the server counts live for one lease timeout more. The
    // server's message says so and what else it may be; the call goes
    // through once that registration lapses.
    std::optional<Clock::time_point> last_warned;
    for (;;) {
      s = WithRetry(
          "register",
          [&] {
            grpc::ClientContext ctx;
            Prepare(ctx);
            return stub->Register(&ctx, req, &res);
          },
          1);
      if (s.error_code() != grpc::StatusCode::ALREADY_EXISTS || Stopping()) break;
      if (!last_warned || Clock::now() - *last_warned >= std::chrono::seconds(30)) {
        last_warned = Clock::now();
        spdlog::warn("register: {}; trying again every few seconds", s.error_message());
      }
      PauseBeforeRetry(Jittered(kIdentityInUseRetryMs), 1);
    }
    if (!s.ok()) {
      return Status::Unavailable("register with " + options.server + ": " + s.error_message() +
                                 (CertificateRejected(s)
                                      ? " (the server's TLS certificate is not trusted: "
                                        "give the CA that signed it with --tls-ca)"
                                      : ""));
    }
    {
      // The session is a secret: never logged.
      MutexLock lock(identity_mu);
      identity_ = {res.worker_id(), res.session()};
      device_ids.assign(res.device_ids().begin(), res.device_ids().end());
    }
    spdlog::info("registered as worker {} with {} device(s)", res.worker_id(),
                 res.device_ids_size());
    if (!res.identity_secret().empty()) {
      // A new identity: the secret (never logged) proves it from now on.
      identity_secret = res.identity_secret();
      if (!options.id_file.empty()) {
        Status saved = WriteIdFile(options.id_file, {options.instance, identity_secret});
        if (!saved.ok()) {
          spdlog::error(
              "{}; the worker goes on, but after a restart it cannot prove it is worker {}, and "
              "registers "
              "as a new worker once this one is no longer live",
              saved.message(), res.worker_id());
        }
      }
    }
    return Status::OK();
  }

  TrialRun ToRun(const v1::Trial& t, const DeviceSpec& device) const {
    TrialRun r;
    r.trial_id = t.trial_id();
    r.experiment_id = t.experiment_id();
    r.number = t.number();
    r.attempt = t.attempt();
    r.seed = static_cast<uint64_t>(t.seed());
    r.space = t.space();
    r.params = ParseOrString(t.params_json());
    for (const auto& [k, v] : t.system().values()) r.system[k] = ParseOrString(v);
    r.max_steps = t.max_steps();
    r.objective_metric = t.objective_metric();
    if (t.executor().has_builtin()) {
      r.trainer = t.executor().builtin().trainer();
      for (const auto& [k, v] : t.executor().builtin().args()) r.trainer_args[k] = ParseOrString(v);
    } else if (t.executor().has_command()) {
      const auto& c = t.executor().command();
      r.argv.assign(c.argv().begin(), c.argv().end());
      for (const auto& [k, v] : c.env()) r.env[k] = v;
      r.timeout_ms = c.timeout_ms();
    }
    r.device = device.device;
    r.threads = options.threads > 0 ? options.threads : std::max(1, device.host_threads);
    r.stop_step = t.stop_step();
    r.resume_step = t.resume_step();
    return r;
  }

  class GrpcReporter final : public Reporter {
   public:
    GrpcReporter(Impl& w, int64_t device_id, const TrialRun& run, SystemChanges declared)
        : w_(w),
          device_id_(device_id),
          trial_id_(run.trial_id),
          name_(TrialName(run)),
          declared_(std::move(declared)) {}
    Verdict Report(int64_t step, const std::map<std::string, double>& metrics,
                   double samples_per_sec, const json& system) override {
      return ReportApplied(step, metrics, samples_per_sec, system, json::object());
    }
    Verdict ReportApplied(int64_t step, const std::map<std::string, double>& metrics,
                          double samples_per_sec, const json& system,
                          const json& applied) override {
      v1::ReportRequest req;
      const Identity me = w_.identity();
      req.set_worker_id(me.worker_id);
      req.set_session(me.session);
      req.set_trial_id(trial_id_);
      req.set_device_id(device_id_);
      req.set_step(step);
      for (const auto& [k, v] : metrics) (*req.mutable_metrics())[k] = v;
      req.set_samples_per_sec(samples_per_sec);
      for (auto it = system.begin(); it != system.end(); ++it) {
        (*req.mutable_system()->mutable_values())[it.key()] = it->dump();
      }
      if (applied.is_object()) {
        for (auto it = applied.begin(); it != applied.end(); ++it) {
          (*req.mutable_applied()->mutable_values())[it.key()] = it->dump();
        }
      }
      // With every report: the server keeps no state about this worker's
      // programs, and the next report may reach another replica.
      for (const auto& [name, change] : declared_) {
        (*req.mutable_system_changes())[name] =
            change == SystemChange::kMidTrial    ? v1::SYSTEM_CHANGE_MID_TRIAL
            : change == SystemChange::kAtRestart ? v1::SYSTEM_CHANGE_AT_RESTART
                                                 : v1::SYSTEM_CHANGE_FIXED;
      }
      v1::ReportResponse res;
      const auto sent = Clock::now();
      grpc::Status s = w_.WithRetry("report", [&] {
        grpc::ClientContext ctx;
        w_.Prepare(ctx);
        return w_.stub->Report(&ctx, req, &res);
      });
      report_ms_ += MsSince(sent);
      if (reports_++ == 0) first_reported_ = Clock::now();
      if (!s.ok()) {
        // The lease is gone (expired, or the trial ended): nothing more to do.
        spdlog::warn("{}: report refused ({}); stopping it", name_, s.error_message());
        stop_ = true;
        return Verdict::kStop;
      }
      last_step_ = step;
      switch (res.decision()) {
        case v1::DECISION_PRUNE:
        case v1::DECISION_CANCEL:
          stop_ = true;
          return Verdict::kStop;
        case v1::DECISION_PAUSE:
          return Verdict::kPause;
        case v1::DECISION_CHANGE_SYSTEM: {
          MutexLock lock(mu_);
          new_system_ = json::object();
          for (const auto& [k, v] : res.new_system().values()) new_system_[k] = ParseOrString(v);
          return Verdict::kChangeSystem;
        }
        default:
          return Verdict::kContinue;
      }
    }
    json new_system() const override {
      MutexLock lock(mu_);
      return new_system_;
    }
    bool stop_requested() const override { return stop_ || w_.Stopping(2); }
    void RequestStop() { stop_ = true; }
    bool stopped_by_server() const { return stop_; }
    // The step of the last report the server acknowledged (0: none).
    int64_t last_step() const { return last_step_; }
    // The wall time of this trial's Report calls, retries included, and
    // their number. REQUIRES: the executor's thread, or after Run returned.
    double report_ms() const { return report_ms_; }
    int64_t reports() const { return reports_; }
    // When the first Report call returned (reports() > 0).
    Clock::time_point first_reported() const { return first_reported_; }

   private:
    Impl& w_;
    int64_t device_id_, trial_id_;
    const std::string name_;
    const SystemChanges declared_;
    std::atomic<bool> stop_{false};
    std::atomic<int64_t> last_step_{0};
    double report_ms_ = 0;
    int64_t reports_ = 0;
    Clock::time_point first_reported_;
    mutable Mutex mu_;
    json new_system_ HPO_GUARDED_BY(mu_) = json::object();
  };

  // A segment's overheads, logged in one line at info level when it is
  // destroyed (client.h gives the format, which bench/hetero reads).
  class SegmentLog {
   public:
    SegmentLog(int64_t trial_id, int64_t resume_step, Clock::time_point leased,
               const GrpcReporter& reporter)
        : trial_id_(trial_id), resume_step_(resume_step), leased_(leased), reporter_(reporter) {}
    ~SegmentLog() {
      const double first_report_ms =
          reporter_.reports() > 0
              ? std::chrono::duration<double, std::milli>(reporter_.first_reported() - leased_)
                    .count()
              : -1;
      spdlog::info(
          "segment trial={} resume_step={} end={} lease_to_first_step_ms={:.0f} "
          "checkpoint_restore_ms={:.0f} "
          "checkpoint_save_ms={:.0f} report_ms={:.0f} reports={} lease_to_first_report_ms={:.0f} "
          "eval_ms={:.0f} segment_ms={:.0f}",
          trial_id_, resume_step_, end, lease_to_first_step_ms_, restore_ms, save_ms,
          reporter_.report_ms(), reporter_.reports(), first_report_ms, eval_ms_, MsSince(leased_));
    }
    // A run of the executor that began at `started`: its own overheads, and
    // its first step's start (a second run, from step 1 after a checkpoint
    // it could not restore, replaces the first's).
    void Ran(Clock::time_point started, const Result<RunResult>& result) {
      const RunResult::Overheads o = result.ok() ? result->overheads : RunResult::Overheads{};
      lease_to_first_step_ms_ =
          std::chrono::duration<double, std::milli>(started - leased_).count() + o.setup_ms;
      restore_ms += o.restore_ms;
      save_ms += o.save_ms;
      eval_ms_ += o.eval_ms;
    }

    const char* end = "left";  // completed, failed, paused, stopped, or left to the server
    double restore_ms = 0;     // download, unpack and the executor's restore
    double save_ms = 0;        // the executor's save, the archive and its upload

   private:
    const int64_t trial_id_, resume_step_;
    const Clock::time_point leased_;
    const GrpcReporter& reporter_;
    double lease_to_first_step_ms_ = -1;  // -1: no run
    double eval_ms_ = 0;
  };

  // Renews a trial's lease every heartbeat_ms while it lives, and stops the
  // trial when the server says it ended meanwhile.
  class Heartbeat {
   public:
    Heartbeat(Impl& w, int64_t trial_id, GrpcReporter& reporter)
        : thread_([this, &w, trial_id, &reporter] {
            for (;;) {
              {
                MutexLock lock(mu_);
                const auto until = Clock::now() + std::chrono::milliseconds(w.options.heartbeat_ms);
                while (!done_ && cv_.WaitUntil(mu_, until)) {
                }
                if (done_) return;
              }
              v1::HeartbeatRequest req;
              const Identity me = w.identity();
              req.set_worker_id(me.worker_id);
              req.set_session(me.session);
              req.add_trial_ids(trial_id);
              v1::HeartbeatResponse res;
              grpc::ClientContext ctx;
              w.Prepare(ctx, 10);
              if (w.stub->Heartbeat(&ctx, req, &res).ok()) {
                for (int64_t id : res.stop_trial_ids()) {
                  if (id == trial_id) reporter.RequestStop();
                }
              } else {
                w.listing_.CallFailed();
              }
            }
          }) {}
    ~Heartbeat() {
      {
        MutexLock lock(mu_);
        done_ = true;
      }
      cv_.NotifyAll();
      thread_.join();
    }

   private:
    Mutex mu_;
    CondVar cv_;
    bool done_ HPO_GUARDED_BY(mu_) = false;
    std::thread thread_;  // last: it uses the members above
  };

  // A trial's own directory: state/ is its checkpoint directory, and the
  // archive of it sits next to it. Removed with everything in it.
  class TrialScratch {
   public:
    TrialScratch(const std::string& base_dir, int64_t trial_id) {
      std::string base = base_dir;
      if (base.empty()) {
        const char* tmp = std::getenv("TMPDIR");
        base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
      }
      // --scratch-dir need not exist yet.
      std::error_code made;
      std::filesystem::create_directories(base, made);
      std::string pattern = base + "/hpo-checkpoint-" + std::to_string(trial_id) + "-XXXXXX";
      if (::mkdtemp(pattern.data()) == nullptr) {
        error_ = "cannot make a directory in " + base + ": " + std::strerror(errno);
        return;
      }
      root_ = pattern;
      std::error_code ec;
      std::filesystem::create_directory(state(), ec);
      if (ec) error_ = "cannot make " + state() + ": " + ec.message();
    }
    ~TrialScratch() {
      std::error_code ec;
      if (!root_.empty()) std::filesystem::remove_all(root_, ec);
    }
    bool ok() const { return error_.empty(); }
    const std::string& error() const { return error_; }
    std::string state() const { return root_ + "/state"; }
    std::string archive() const { return root_ + "/checkpoint.hpodir"; }
    // Empties the checkpoint directory (a restart starts from nothing).
    void Clear() {
      std::error_code ec;
      std::filesystem::remove_all(state(), ec);
      std::filesystem::create_directory(state(), ec);
      std::filesystem::remove(archive(), ec);
    }

   private:
    std::string root_;
    std::string error_;
  };

  // Sends the file at `path` as the trial's checkpoint taken after `step`.
  Status UploadCheckpoint(const TrialRun& run, int64_t step, const std::string& path) {
    const int64_t trial_id = run.trial_id;
    std::error_code ec;
    const auto size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
    if (ec) return Status::Internal("cannot read " + path + ": " + ec.message());
    // Long enough for a slow link (1 MiB/s), not forever.
    const int seconds = static_cast<int>(std::min<int64_t>(60 + (size >> 20), 24 * 3600));
    grpc::Status s;
    for (int attempt = 0; attempt < kCheckpointTransferAttempts; ++attempt) {
      if (attempt > 0) Sleep(1000 << attempt, 2);
      std::ifstream in(path, std::ios::binary);
      if (!in) return Status::Internal("cannot read " + path);
      grpc::ClientContext ctx;
      Prepare(ctx, seconds);
      v1::UploadCheckpointResponse res;
      auto writer = stub->UploadCheckpoint(&ctx, &res);
      Sha256 sha;
      // The fault hook's upload comes in two halves, with its hold between.
      const int64_t chunk_bytes = options.test_pause_hold_ms > 0
                                      ? std::clamp<int64_t>((size + 1) / 2, 1, kChunkBytes)
                                      : static_cast<int64_t>(kChunkBytes);
      std::string buf(static_cast<size_t>(chunk_bytes), '\0');
      int64_t sent = 0;
      const Identity me = identity();
      for (bool first = true;; first = false) {
        if (!first && options.test_pause_hold_ms > 0) {
          spdlog::info("test hold: {} checkpoint of step {} half uploaded; holding {} ms",
                       TrialName(run), step, options.test_pause_hold_ms);
          std::this_thread::sleep_for(std::chrono::milliseconds(options.test_pause_hold_ms));
        }
        in.read(buf.data(),
                static_cast<std::streamsize>(std::min<int64_t>(chunk_bytes, size - sent)));
        const auto n = static_cast<size_t>(in.gcount());
        v1::CheckpointChunk chunk;
        if (first) {
          chunk.set_worker_id(me.worker_id);
          chunk.set_session(me.session);
          chunk.set_trial_id(trial_id);
          chunk.set_step(step);
          chunk.set_total_bytes(size);
        }
        chunk.set_data(buf.data(), n);
        sha.Update(std::string_view(buf.data(), n));
        sent += static_cast<int64_t>(n);
        const bool last = sent >= size || n == 0;
        if (last) chunk.set_sha256(sha.HexDigest());
        // False: the server ended the call early; Finish says why.
        if (!writer->Write(chunk) || last) break;
      }
      writer->WritesDone();
      s = writer->Finish();
      if (s.ok()) return Status::OK();
      listing_.CallFailed();
      // A checkpoint over the server's limit is too big every time.
      if (!Retryable(s) || FromGrpcStatus(s).code() == StatusCode::kResourceExhausted ||
          Stopping(2))
        break;
      spdlog::warn("{}: checkpoint upload failed ({}); trying again", TrialName(run), Describe(s));
    }
    return Status::Unavailable("upload: " + Describe(s));
  }

  // Fetches the trial's checkpoint (taken after `resume_step`) into `path`,
  // checked against the size and SHA-256 the server sends with it.
  Status DownloadCheckpoint(const TrialRun& run, const std::string& path) {
    const int64_t trial_id = run.trial_id, resume_step = run.resume_step;
    grpc::Status s;
    for (int attempt = 0; attempt < kCheckpointTransferAttempts; ++attempt) {
      if (attempt > 0) Sleep(1000 << attempt, 2);
      grpc::ClientContext ctx;
      Prepare(ctx, 24 * 3600);  // bounded by its size, checked as it comes
      v1::DownloadCheckpointRequest req;
      const Identity me = identity();
      req.set_worker_id(me.worker_id);
      req.set_session(me.session);
      req.set_trial_id(trial_id);
      auto reader = stub->DownloadCheckpoint(&ctx, req);
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      if (!out) return Status::Internal("cannot write " + path);
      Sha256 sha;
      int64_t total = -1, got = 0;
      std::string want;
      std::string wrong;  // what is wrong with what arrived
      v1::CheckpointChunk chunk;
      while (wrong.empty() && reader->Read(&chunk)) {
        if (total < 0) {
          total = chunk.total_bytes();
          if (chunk.step() != resume_step) {
            wrong = "the server sent the checkpoint of step " + std::to_string(chunk.step()) +
                    ", not " + std::to_string(resume_step);
          }
        }
        if (!want.empty()) wrong = "data came after the last chunk";
        got += static_cast<int64_t>(chunk.data().size());
        if (got > total) wrong = "more than the " + std::to_string(total) + " bytes announced";
        out.write(chunk.data().data(), static_cast<std::streamsize>(chunk.data().size()));
        sha.Update(chunk.data());
        if (!chunk.sha256().empty()) want = chunk.sha256();
      }
      if (!wrong.empty()) ctx.TryCancel();
      s = reader->Finish();
      if (!s.ok()) listing_.CallFailed();
      out.close();
      if (!wrong.empty()) return Status::DataLoss("download: " + wrong);
      if (s.ok()) {
        if (!out) return Status::Internal("cannot write " + path);
        if (want.empty() || got != total) {
          return Status::DataLoss("download: " + std::to_string(got) + " of " +
                                  std::to_string(total) + " bytes arrived, without the last chunk");
        }
        const std::string have = sha.HexDigest();
        std::string lower = want;
        for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (have != lower)
          return Status::DataLoss("download: the SHA-256 is " + have + ", not " + lower);
        return Status::OK();
      }
      if (!Retryable(
              s)) {  // the server's answer (none kept, the lease gone): no try will change it
        return Status(FromGrpcStatus(s).code(), "download: " + Describe(s));
      }
      if (Stopping(2)) break;
      spdlog::warn("{}: checkpoint download failed ({}); trying again", TrialName(run),
                   Describe(s));
    }
    // Unavailable: the server could not be reached (or could not send it)
    // through every try, which says nothing of the checkpoint itself.
    return Status::Unavailable("download: " + Describe(s));
  }

  // The resumed trial's state into its checkpoint directory.
  Status RestoreCheckpoint(const TrialRun& run, TrialScratch& scratch) {
    if (!scratch.ok()) return Status::Internal(scratch.error());
    HPO_RETURN_IF_ERROR(DownloadCheckpoint(run, scratch.archive()));
    Status s = UnpackDirectory(scratch.archive(), scratch.state());
    std::error_code ec;
    std::filesystem::remove(scratch.archive(), ec);
    return s;
  }

  // The checkpoint cannot be used: the server drops the trial's steps and
  // it runs from step 1 under the same lease. False: the server refused
  // (the lease is gone), and the trial is left to it.
  bool RestartFromScratch(TrialRun& run, TrialScratch& scratch, const std::string& why) {
    spdlog::warn("{}: cannot resume after step {} ({}); starting it again from step 1",
                 TrialName(run), run.resume_step, why);
    v1::RestartRequest req;
    const Identity me = identity();
    req.set_worker_id(me.worker_id);
    req.set_session(me.session);
    req.set_trial_id(run.trial_id);
    req.set_reason(why);
    v1::RestartResponse res;
    grpc::Status s = WithRetry("restart", [&] {
      grpc::ClientContext ctx;
      Prepare(ctx);
      return stub->Restart(&ctx, req, &res);
    });
    if (!s.ok()) {
      spdlog::warn("{}: restart refused ({}); leaving it", TrialName(run), Describe(s));
      return false;
    }
    scratch.Clear();
    run.resume_step = 0;
    return true;
  }

  // After a kPause: uploads what the executor saved, then pauses the trial,
  // with or without its checkpoint. Returns the milliseconds the archive and
  // its upload took.
  double PauseTrial(const TrialRun& run, TrialScratch& scratch, const RunResult& result,
                    int64_t step) {
    std::string problem = result.checkpoint_error;
    if (result.checkpoint_saved && !scratch.ok()) problem = scratch.error();
    bool uploaded = false;
    const auto packing = Clock::now();
    if (result.checkpoint_saved && scratch.ok()) {
      Status s = PackDirectory(scratch.state(), scratch.archive());
      if (s.ok()) s = UploadCheckpoint(run, step, scratch.archive());
      uploaded = s.ok();
      if (!s.ok()) problem = s.message();
    }
    const double upload_ms = MsSince(packing);
    if (uploaded && options.test_pause_hold_ms > 0) {
      spdlog::info("test hold: {} checkpoint of step {} uploaded; holding {} ms before its Pause",
                   TrialName(run), step, options.test_pause_hold_ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(options.test_pause_hold_ms));
    }
    v1::PauseRequest req;
    const Identity me = identity();
    req.set_worker_id(me.worker_id);
    req.set_session(me.session);
    req.set_trial_id(run.trial_id);
    req.set_step(step);
    req.set_checkpoint_uploaded(uploaded);
    v1::PauseResponse res;
    grpc::Status s = WithRetry("pause", [&] {
      grpc::ClientContext ctx;
      Prepare(ctx);
      return stub->Pause(&ctx, req, &res);
    });
    if (!s.ok()) {
      spdlog::warn("{}: pause refused: {}", TrialName(run), Describe(s));
    } else if (uploaded) {
      spdlog::info("{} paused after step {} with its checkpoint", TrialName(run), step);
    } else {
      spdlog::warn("{} paused after step {} without a checkpoint: {}", TrialName(run), step,
                   problem);
    }
    return upload_ms;
  }

  // Runs one leased trial; returns when it is complete, failed, paused or
  // stopped.
  void RunTrial(const v1::Trial& t, const DeviceSpec& device, int64_t device_id) {
    const auto leased = Clock::now();
    TrialRun run = ToRun(t, device);
    spdlog::info("{} on {} (space {}, attempt {}): {}", TrialName(run), device.device, run.space,
                 run.attempt, run.params.dump());
    Executor* executor = !run.trainer.empty() ? executors.builtin.get() : executors.command.get();
    GrpcReporter reporter(*this, device_id, run,
                          executor ? executor->DeclaredSystemChanges(run) : SystemChanges{});
    // Heartbeats renew the lease during long epochs and transfers, and
    // bring prunes and cancels in between reports.
    Heartbeat heartbeat(*this, run.trial_id, reporter);
    TrialScratch scratch(options.scratch_dir, run.trial_id);
    if (scratch.ok()) {
      run.checkpoint_dir = scratch.state();
    } else if (run.stop_step > 0 || run.resume_step > 0) {
      spdlog::warn("{}: no checkpoint directory: {}", TrialName(run), scratch.error());
    }
    SegmentLog segment(run.trial_id, run.resume_step, leased, reporter);
    if (run.resume_step > 0) {
      const auto restoring = Clock::now();
      Status restored = RestoreCheckpoint(run, scratch);
      segment.restore_ms += MsSince(restoring);
      if (!restored.ok()) {
        // Never resume from a checkpoint that did not arrive whole.
        scratch.Clear();
        if (restored.code() == StatusCode::kUnavailable) {
          // Not fetched, rather than missing or damaged (a server restart
          // outlasted the tries): starting over would throw a good
          // checkpoint away. The trial is left to the server: this
          // worker's next lease lists what it holds without it, the server
          // ends this lease, and the trial waits at its rung, checkpoint
          // and curve kept, for its next promotion.
          spdlog::warn(
              "{}: cannot fetch its checkpoint ({}); leaving it to the server to resume later",
              TrialName(run), restored.message());
          return;
        }
        if (!RestartFromScratch(run, scratch,
                                "the checkpoint could not be restored: " + restored.message()))
          return;
      } else {
        spdlog::info("{}: resuming after step {}", TrialName(run), run.resume_step);
      }
    }
    auto execute = [&] {
      const auto started = Clock::now();
      Result<RunResult> ran =
          executor ? executor->Run(run, reporter)
                   : Result<RunResult>(Status::Unimplemented("no executor for this trial"));
      segment.Ran(started, ran);
      return ran;
    };
    Result<RunResult> result = execute();
    if (result.ok() && !result->restore_error.empty()) {
      if (!RestartFromScratch(run, scratch, result->restore_error)) return;
      result = execute();
    }
    if (result.ok() && result->paused && !result->stopped) {
      segment.end = "paused";
      segment.save_ms += PauseTrial(run, scratch, *result, reporter.last_step());
      return;
    }

    if (result.ok() && result->stopped) {
      segment.end = "stopped";
      spdlog::info("{} stopped", TrialName(run));
      return;  // pruned, cancelled, or abandoned on shutdown: the server knows
    }
    v1::CompleteRequest req;
    const Identity me = identity();
    req.set_worker_id(me.worker_id);
    req.set_session(me.session);
    req.set_trial_id(run.trial_id);
    if (result.ok()) {
      for (const auto& [k, v] : result->final_metrics) (*req.mutable_final_metrics())[k] = v;
    } else {
      req.set_failed(true);
      req.set_reason(result.status().message());
    }
    if (result.ok()) req.set_log_tail(result->log_tail);
    segment.end = result.ok() ? "completed" : "failed";
    v1::CompleteResponse res;
    grpc::Status s = WithRetry("complete", [&] {
      grpc::ClientContext ctx;
      Prepare(ctx);
      return stub->Complete(&ctx, req, &res);
    });
    if (!s.ok()) {
      spdlog::warn("{}: completion refused: {}", TrialName(run), s.error_message());
    } else if (result.ok()) {
      spdlog::info("{} completed: {}", TrialName(run), json(result->final_metrics).dump());
    } else {
      spdlog::warn("{} failed: {}", TrialName(run), result.status().message());
    }
  }

  // Tells the server this worker stops, once its trials ended, paused or
  // were abandoned: it leaves the fleet now, and any lease it still holds
  // goes back at once, rather than after the lease timeout. One try with a
  // short deadline: a server that does not answer (or predates Leave)
  // drops the worker after the timeout, as before.
  void Leave() {
    const Identity me = identity();
    if (me.worker_id == 0) return;
    v1::LeaveRequest req;
    req.set_worker_id(me.worker_id);
    req.set_session(me.session);
    v1::LeaveResponse res;
    grpc::ClientContext ctx;
    Prepare(ctx, kLeaveDeadlineS);
    const grpc::Status s = stub->Leave(&ctx, req, &res);
    if (!s.ok()) {
      spdlog::warn("leave: {}; the server drops this worker after its lease timeout", Describe(s));
    } else if (res.requeued_trial_ids_size() > 0) {
      spdlog::info("left the fleet; {} trial(s) it held went back to the server",
                   res.requeued_trial_ids_size());
    } else {
      spdlog::info("left the fleet");
    }
  }

  void DeviceLoop(size_t index) {
    const DeviceSpec& device = options.devices[index];
    while (!Stopping()) {
      if (options.max_trials > 0 && trials_done.load() >= options.max_trials) return;
      int64_t device_id;
      v1::LeaseRequest req;
      {
        MutexLock lock(identity_mu);
        device_id = device_ids.at(index);
        req.set_worker_id(identity_.worker_id);
        req.set_session(identity_.session);
      }
      req.set_device_id(device_id);
      // A long poll: with nothing to run, the server answers as soon as
      // work appears, or after this long. Short, so that a worker asked to
      // stop waits little for its call.
      req.set_max_wait_ms(kLeaseWaitMs);
      v1::LeaseResponse res;
      grpc::Status s;
      {
        MutexLock serial(lease_mu);
        s = WithRetry(
            "lease",
            [&] {
              const HeldListing::Try listing = listing_.Next();
              req.set_lists_held(listing.list);
              req.clear_held_trial_ids();
              if (listing.list) {
                MutexLock lock(held_mu);
                for (const int64_t id : held_) req.add_held_trial_ids(id);
              }
              grpc::ClientContext ctx;
              Prepare(ctx);
              grpc::Status called = stub->Lease(&ctx, req, &res);
              if (called.ok()) {
                listing_.WentThrough(listing);
              } else {
                listing_.LeaseFailed();  // counted by WithRetry, like every failed call
              }
              return called;
            },
            1);
        if (s.ok() && res.has_trial()) {
          MutexLock lock(held_mu);
          held_.insert(res.trial().trial_id());
        }
      }
      const Status status = FromGrpcStatus(s);
      if (status.IsNotFound() || status.code() == StatusCode::kPermissionDenied) {
        // The server does not know this registration (a new database: the
        // id is unknown, or is now another worker's, whose session ours is
        // not; or one from before sessions): register again.
        MutexLock lock(register_mu);
        if (identity().worker_id == req.worker_id()) {
          spdlog::warn("lease: {}; registering again", s.error_message());
          if (!Register().ok()) return;
        }
        continue;
      }
      if (!s.ok()) {
        if (Stopping()) return;
        spdlog::error("lease: {}", s.error_message());
        Sleep(5000);
        continue;
      }
      if (!res.has_trial()) {
        Sleep(std::max<int64_t>(100, res.retry_after_ms()));
        continue;
      }
      const int64_t failures = listing_.failures();
      RunTrial(res.trial(), device, device_id);
      {
        MutexLock lock(held_mu);
        held_.erase(res.trial().trial_id());  // completed, failed, paused or given up
      }
      listing_.TrialLeft(failures);
      ++trials_done;
    }
  }
};

WorkerClient::WorkerClient(WorkerOptions options, Executors executors)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->executors = std::move(executors);
  MutexLock lock(impl_->register_mu);
  impl_->identity_secret = impl_->options.identity_secret;
}

WorkerClient::~WorkerClient() = default;

Status WorkerClient::Run(const std::atomic<int>& stop_level) {
  Impl& w = *impl_;
  if (w.options.devices.empty()) return Status::InvalidArgument("no devices to serve");
  w.stop_level = &stop_level;
  grpc::ChannelArguments args;
  // gRPC's defaults (1 s growing to 120 s) would leave a fleet idle for up
  // to two minutes after its server restarts; gRPC jitters these itself.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, static_cast<int>(kFirstRetryMs));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(kMaxRetryMs));
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (w.options.tls) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = w.options.tls_ca_pem;
    credentials = grpc::SslCredentials(ssl);
  }
  w.channel = grpc::CreateCustomChannel(w.options.server, credentials, args);
  w.stub = v1::WorkerService::NewStub(w.channel);
  {
    MutexLock lock(w.register_mu);
    HPO_RETURN_IF_ERROR(w.Register());
  }
  std::vector<std::thread> loops;
  for (size_t i = 0; i < w.options.devices.size(); ++i)
    loops.emplace_back([&w, i] { w.DeviceLoop(i); });
  for (auto& t : loops) t.join();
  w.Leave();
  return Status::OK();
}

}  // namespace hpo::worker
