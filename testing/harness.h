// What the fault and load runs (bench/faults, bench/load, tests/fault_test)
// drive: the real hpo-server and hpo-worker binaries as processes that can
// be killed, stopped and restarted; a private PostgreSQL that can be stopped
// and started; a REST helper; and simulated workers that speak the gRPC
// worker protocol directly, so the caller knows exactly which calls the
// server acknowledged and how long each took.
//
// Everything listens on 127.0.0.1 only.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/http_client.h"
#include "common/status.h"
#include "hpo/v1/worker.grpc.pb.h"
#include "proto/grpc_status.h"
#include "proto/held_listing.h"
#include "testing/files.h"
#include "testing/process.h"
#include "testing/server_process.h"

namespace hpo::testing {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point start);
// The q-quantile (0..1) of `v` (nearest rank); 0 for an empty vector.
double Quantile(std::vector<double> v, double q);

// A PostgreSQL server of its own: initdb in a new /tmp/hpo-pg-XXXXXX (a
// directory the postgres user can reach), on a free port of 127.0.0.1 with
// its socket dir inside that dir. As root it runs as the `postgres` user
// (initdb refuses root). Stop and Start keep the data.
class PostgresInstance {
 public:
  // FailedPrecondition: no PostgreSQL server binaries on this machine.
  static Result<std::unique_ptr<PostgresInstance>> Create();
  ~PostgresInstance();  // stops it (immediate) and removes its files

  // pg_ctl stop -m fast: open connections are terminated.
  Status Stop();
  // pg_ctl start, waiting until it accepts connections.
  Status Start();
  // Creates an empty database (psql over the socket dir).
  Status CreateDatabase(const std::string& name);
  // The URL of the `postgres` database, to pass to the functions below.
  std::string AdminUrl() const { return Url(); }
  // The URL of database `db` (the `postgres` database exists from initdb).
  std::string Url(const std::string& db = "postgres") const;

 private:
  PostgresInstance() = default;
  Status PgCtl(const std::vector<std::string>& args);
  std::string bin_, dir_;
  uint16_t port_ = 0;
  bool started_ = false;
};

// Creates (DropPostgresDatabase: drops, with FORCE) database `name` on the
// PostgreSQL server of `admin_url` (a URL of a database that exists there,
// such as `postgres`); returns the new database's URL. For a server that is
// not a PostgresInstance, such as the one scripts/test starts.
Result<std::string> CreatePostgresDatabase(const std::string& admin_url, const std::string& name);
Status DropPostgresDatabase(const std::string& admin_url, const std::string& name);

// REST ----------------------------------------------------------------------

// One request on a fresh connection. Ok only for a 2xx answer with a JSON
// body; otherwise the status says what went wrong (the HTTP status and body,
// or the transport error).
Result<nlohmann::json> RestCall(uint16_t port, const std::string& method, const std::string& target,
                                const std::string& body = "",
                                std::chrono::milliseconds timeout = std::chrono::seconds(10));
// Creates an experiment from a JSON or YAML spec; its id.
Result<int64_t> CreateExperiment(uint16_t port, const std::string& spec);

// Simulated workers ------------------------------------------------------------

// One worker with one CPU device over its own gRPC connection. Every call
// carries a deadline; none retries.
class SimWorker {
 public:
  SimWorker(const std::string& address, std::chrono::milliseconds deadline);
  grpc::Status Register(const std::string& host);
  // Says this worker holds no trial (lists_held, none listed) on its first
  // lease and after any failed call, by hpo-worker's rule
  // (proto/held_listing.h). Its callers lease only between trials, so a
  // trial still leased to it then is one whose answer was lost, or one it
  // gave up after a refused call.
  grpc::Status Lease(v1::LeaseResponse* out);
  grpc::Status Report(int64_t trial_id, int64_t step, double loss, v1::ReportResponse* out);
  grpc::Status Complete(int64_t trial_id, double loss);
  grpc::Status Heartbeat(int64_t trial_id, v1::HeartbeatResponse* out);
  // Promotion-type early stopping (worker.proto's Pause, UploadCheckpoint,
  // DownloadCheckpoint, Restart).
  grpc::Status Pause(int64_t trial_id, int64_t step, bool checkpoint_uploaded);
  // Sends `data` as the checkpoint of (trial, step) in chunks of at most
  // `chunk_bytes`, the last with its SHA-256. With `cut_after_chunks` >= 0
  // the stream is cut after that many chunks instead, as a worker dying
  // mid-upload cuts it: the chunks are sent, the call is given a moment to
  // reach the server, then cancelled (the answer is then CANCELLED).
  grpc::Status UploadCheckpoint(int64_t trial_id, int64_t step, const std::string& data,
                                size_t chunk_bytes, int cut_after_chunks = -1);
  // The whole checkpoint of a resumed trial; `step` and `sha256` are what
  // its first and last chunks said.
  grpc::Status DownloadCheckpoint(int64_t trial_id, std::string* data, int64_t* step,
                                  std::string* sha256);
  grpc::Status Restart(int64_t trial_id, const std::string& reason);
  int64_t worker_id() const { return worker_id_; }
  // Waits up to `d` before a call is tried again, keeping the channel
  // connecting meanwhile, and returns once it is connected (hpo-worker's
  // PauseBeforeRetry: a synchronous client that only slept noticed a new
  // server's connection at gRPC's 5 s backup poll). Connected already: it
  // waits all of `d`. `stop`, when set, ends it early.
  void PauseBeforeRetry(std::chrono::milliseconds d, const std::atomic<bool>* stop = nullptr) const;

 private:
  void Prepare(grpc::ClientContext& ctx) const;
  grpc::Status Counted(grpc::Status s);  // counts a failed call in listing_
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  std::chrono::milliseconds deadline_;
  int64_t worker_id_ = 0, device_id_ = 0;
  std::string session_;  // Register's secret, sent with every later call
  HeldListing listing_;
};

// "UNAVAILABLE", "DATA_LOSS", ...: how the figures name gRPC codes.
std::string CodeName(grpc::StatusCode code);

// The loss a simulated worker reports for (trial, step): distinct per
// report, so a check can tell one stored measurement from another.
double SimLoss(int64_t trial_id, int64_t step);

// What happened to one segment of a trial on a simulated worker: the part
// of it run under one lease (a whole trial, or with promotion-type early
// stopping the part up to a rung, or from a rung to the next).
enum class SegmentEvent {
  kLeased,      // `step`: the lease's resume_step (0: from scratch)
  kRestarted,   // its checkpoint was unusable; Restart acknowledged: the server dropped every step
  kPaused,      // at the rung `step`, its checkpoint uploaded
  kPausedBare,  // at the rung `step`, Pause acknowledged without a checkpoint
  kCompleted,   // Complete acknowledged
  kStopped,     // a report at `step` was answered prune or cancel
};
const char* SegmentEventName(SegmentEvent e);

// The checkpoint a simulated worker uploads at a rung: names the trial and
// the step, so a resumed segment can tell its own from another's.
std::string SimCheckpoint(int64_t trial_id, int64_t step);

struct FleetOptions {
  std::string address;  // the server's gRPC address
  int workers = 8;
  int steps = 5;                               // per trial
  std::chrono::milliseconds step_time{20};     // sleep before each report
  bool heartbeat = false;                      // a Heartbeat before each report
  std::chrono::milliseconds deadline{10'000};  // per RPC
  std::chrono::milliseconds retry_pause{
      100};  // after an error IsRetryable (common/status.h) accepts
  // Each worker waits a random time below this before it registers, as a
  // fleet's workers start spread out.
  std::chrono::milliseconds start_spread{1000};
  // Empty: every report is {"loss": SimLoss}. Otherwise the loss is this
  // function of the trial's parameters (its Assignment as JSON) and the
  // step, so a model-based sampler has something to learn.
  std::function<double(const nlohmann::json& params, int64_t step)> objective;
  // Called from a worker's thread as each Report and Complete is answered
  // OK, so that a caller can record them where a kill -9 does not lose
  // them (bench/soak writes them to a file as they come).
  // `segment` numbers the fleet's leases (from 0), so that a caller can
  // tell which reports went with which lease; on_segment says how each
  // began and ended (an end not acknowledged - the lease lost or run out -
  // is not called).
  std::function<void(int64_t segment, int64_t trial_id, int64_t step, double loss)> on_report;
  std::function<void(int64_t segment, int64_t trial_id, SegmentEvent event, int64_t step)>
      on_segment;
  std::function<void(int64_t trial_id, double loss)> on_complete;
};

// What a fleet saw, added over its workers.
struct FleetStats {
  int64_t rpcs = 0;
  std::map<std::string, int64_t> errors;  // by gRPC code name, e.g. "UNAVAILABLE"
  int64_t errors_total = 0;
  std::vector<std::string> error_samples;  // the first few failed calls
  std::map<std::string, std::string>
      first_error;                 // by gRPC code name: the first call that failed so
  std::vector<double> latency_ms;  // of every RPC
  // The same, by call ("register", "lease", "report", "complete",
  // "heartbeat"), each in the order the calls returned.
  std::map<std::string, std::vector<double>> call_ms;
  int64_t trials_completed = 0;
  // Promotion-type early stopping: segments paused at a rung, resumed
  // from their checkpoint, restarted from scratch (an unusable checkpoint).
  int64_t pauses = 0, resumes = 0, restarts = 0;
  // Every Report the server answered OK: trial -> step -> loss sent.
  std::map<int64_t, std::map<int64_t, double>> acked;
  int64_t acked_reports = 0;
  // Of `errors`, the calls refused because the trial was no longer this
  // worker's (FAILED_PRECONDITION, "not leased to"): the late calls of a
  // lease that ran out while the worker could not renew it. The server
  // refuses them by contract; their segment's reports count as dropped.
  int64_t refused_not_leased = 0;
  std::optional<Clock::time_point> last_error;  // when the last failed RPC returned
  Clock::time_point last_ok{};                  // when the last OK Report returned
};

// Threads of SimWorkers, each: Register, then Lease -> Report every step ->
// Complete, forever. A lease with a stop_step pauses there as hpo-worker
// does (UploadCheckpoint of SimCheckpoint, tried kCheckpointTransferAttempts times
// with a heartbeat between tries, then Pause); one with a
// resume_step downloads its checkpoint and goes on after it, or Restarts
// from step 0 when it is missing or not its own. A call that fails with an error IsRetryable
// accepts (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED: the server may be restarting or
// full; ABORTED up to kMaxAbortedAttempts times: a lost race) is retried after retry_pause, as
// hpo-worker retries it; a Report or Complete refused otherwise abandons the trial. Every RPC is
// counted.
class SimFleet {
 public:
  explicit SimFleet(FleetOptions options);
  ~SimFleet();  // Stop()
  void Start();
  // Stops the workers and waits for them (each finishes its current call).
  void Stop();
  FleetStats Snapshot() const;
  // Waits up to `timeout` for an OK Report that returned after `since`.
  bool WaitForReportAfter(Clock::time_point since, std::chrono::milliseconds timeout) const;

 private:
  void Run(int index);
  grpc::Status Timed(const char* what, const std::function<grpc::Status()>& rpc);
  void Acked(int64_t trial_id, int64_t step, double loss);
  void Count(int64_t FleetStats::*counter);

  FleetOptions options_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> next_segment_{0};
  std::vector<std::thread> threads_;
  mutable std::mutex mu_;
  FleetStats stats_;  // GUARDED_BY(mu_)
};

// REST clients reading what a dashboard and hpctl read, in a loop.
struct RestLoadOptions {
  uint16_t port = 0;
  int clients = 2;
  std::chrono::milliseconds timeout{10'000};
  std::chrono::milliseconds pause{0};  // between one client's calls
};

struct RestStats {
  int64_t calls = 0;
  std::map<std::string, int64_t> errors;  // "503", "DeadlineExceeded", ...
  int64_t errors_total = 0;
  std::vector<double> latency_ms;
  std::vector<std::string> error_samples;  // the first few error texts
};

class RestLoad {
 public:
  explicit RestLoad(RestLoadOptions options);
  ~RestLoad();
  void Start();
  void Stop();
  RestStats Snapshot() const;

 private:
  void Run(int index);
  RestLoadOptions options_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  mutable std::mutex mu_;
  RestStats stats_;  // GUARDED_BY(mu_)
};

// Ask/tell clients of one client experiment (executor: client), each in a
// loop as the Python client's Experiment.trials() runs it: suggest one
// trial, report `steps` steps, complete it. Each call is one request on a
// fresh connection (the Python client holds none between calls); none
// retries, and a failed call abandons its trial.
struct AskTellOptions {
  uint16_t port = 0;
  int64_t experiment_id = 0;
  int clients = 1;
  int steps = 3;
  std::chrono::milliseconds timeout{10'000};
  // As FleetOptions::objective; empty: the loss of a step is SimLoss.
  std::function<double(const nlohmann::json& params, int64_t step)> objective;
};

struct AskTellStats {
  int64_t calls = 0, errors_total = 0;
  std::vector<std::string> error_samples;  // the first few failed calls
  // By call ("suggest", "report", "complete"), in the order they returned.
  std::map<std::string, std::vector<double>> call_ms;
  int64_t trials_completed = 0;
  int64_t empty_suggestions = 0;  // suggest answered no trial (the budget is handed out)
};

class AskTellClients {
 public:
  explicit AskTellClients(AskTellOptions options);
  ~AskTellClients();  // Stop()
  void Start();
  void Stop();  // each client finishes its current call
  AskTellStats Snapshot() const;

 private:
  void Run(int index);
  AskTellOptions options_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  mutable std::mutex mu_;
  AskTellStats stats_;  // GUARDED_BY(mu_)
};

}  // namespace hpo::testing
