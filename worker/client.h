// The worker's loop against hpo-server over gRPC: register the devices
// (the server answers with an id and a session secret that every later call
// presents; a lease refused as NOT_FOUND or PERMISSION_DENIED registers
// again; a registration refused as ALREADY_EXISTS - its instance is live
// under a secret this worker does not have - is tried again every few
// seconds, as it succeeds once that registration lapses), then per device
// lease a trial, run it with the right executor, report
// every step (each report renews the lease; a heartbeat thread covers long
// epochs and learns of prunes and cancels), complete it, repeat.
//
// Checkpoints (promotion-type early stopping; see worker/executor.h): a
// lease with resume_step > 0 first downloads the trial's checkpoint, checks
// its size and SHA-256 and unpacks it into the trial's checkpoint
// directory; if that fails, or the executor cannot restore it, the worker
// calls Restart with the reason and runs the trial from step 1. A report
// answered DECISION_PAUSE ends the run with the executor's state saved in
// that directory; the worker archives it (worker/checkpoint_archive.h),
// uploads it in chunks of 1 MiB with its SHA-256 and calls Pause, with
// checkpoint_uploaded false when saving or uploading failed (the trial is
// paused without one, never failed for it). Heartbeats go on through the
// transfers, so a large checkpoint does not cost the lease.
//
// The server going away is expected: every call retries with jittered
// exponential backoff (0.1 s doubling to 1 s) until it answers or the
// worker stops; a call answered ABORTED (a lost race) is tried at most
// kMaxAbortedAttempts (proto/grpc_status.h) times. Which errors are retried
// is IsRetryable's rule (common/status.h).
// Stopping (SIGTERM): the current trials finish, then the worker exits; a
// second stop request abandons them. Either way, and when max_trials are
// done, it then calls Leave (one try, 3 s): the server drops it from the
// fleet at once and hands out again any trial it still held, rather than
// after the lease timeout.
//
// Each segment (one lease of one trial, from the lease's answer to the
// trial's completion, pause or hand-back) ends with one line at info level
// of where its time went besides training, for bench/hetero to read; times
// in whole milliseconds, -1 where it did not happen:
//   segment trial=N resume_step=R end=completed|failed|paused|stopped|left
//     lease_to_first_step_ms=A checkpoint_restore_ms=B checkpoint_save_ms=C
//     report_ms=D reports=K lease_to_first_report_ms=E eval_ms=F segment_ms=G
// (one line). A: to the executor's first step (the download, unpack and
// restore included; for a command program, to its start). B: download,
// unpack and the executor's restore. C: the executor's save, the archive
// and its upload. D: the K Report calls, retries included. F: the built-in
// trainers' evaluations. G: the whole segment.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/executor.h"

namespace hpo::worker {

struct DeviceSpec {
  std::string device;  // "cpu" or "cuda:N"
  std::string name;
  double cores = 0;  // CPU: usable cores; CUDA: multiprocessors (reported, not used for threads)
  int64_t memory_bytes = 0;
  double benchmark_gflops = 0;
  // Intra-op CPU threads of a trial on this device (without --threads): a
  // CPU device's usable cores; for a CUDA device its share of the host's
  // usable cores (data loading, the optimizer's host work), never its
  // multiprocessor count.
  int host_threads = 1;
};

struct WorkerOptions {
  std::string server = "127.0.0.1:50051";  // HOST:PORT
  // TLS to the server (grpc::SslCredentials), with the server's certificate
  // verified against tls_ca_pem (PEM text; empty: the system's CAs).
  bool tls = false;
  std::string tls_ca_pem;
  std::string token;
  std::string host;  // reported to the server; the hostname when empty
  // Who this worker is across restarts, besides its host (a pod name, an id
  // file's content): registering again with it and identity_secret keeps
  // the server's worker id. Empty: the server makes a new worker on every
  // registration.
  std::string instance;
  // The secret the server issued with `instance` at its first registration
  // (an id file's second line, worker/id_file.h), presented when
  // registering; empty: none yet. A secret the server issues replaces it,
  // in memory and in id_file.
  std::string identity_secret;
  // The id file `instance` came from, where an issued secret is written for
  // the next start; empty: the secret is kept in memory only, so a
  // restarted worker registers as a new worker (once the server no longer
  // counts its old registration live).
  std::string id_file;
  std::map<std::string, std::string> labels;
  std::vector<DeviceSpec> devices;
  int threads = 0;  // intra-op threads per CPU trial; 0: the device's cores
  int64_t heartbeat_ms = 5000;
  int64_t max_trials = 0;  // stop after this many trials (0: run until stopped)
  // Where each trial's checkpoint directory and its archive are kept while
  // it runs (removed after); empty: $TMPDIR, else /tmp.
  std::string scratch_dir;
  // A fault-test hook (testing/scenarios.h, Migration), never set in
  // production: > 0 makes every pause's checkpoint save last longer, so
  // that a kill -9 lands inside it at a known point. The upload is sent in
  // two halves with this many milliseconds between them, and the Pause
  // waits as long again after the upload was acknowledged; each hold is
  // logged first ("test hold: ..."). Heartbeats go on meanwhile. 0 (the
  // default): no hold, and uploads in chunks of 1 MiB as always.
  int64_t test_pause_hold_ms = 0;
};

struct Executors {
  std::unique_ptr<Executor> builtin;
  std::unique_ptr<Executor> command;
};

class WorkerClient {
 public:
  WorkerClient(WorkerOptions options, Executors executors);
  ~WorkerClient();
  // Runs until stop_level >= 1 and nothing is running, or max_trials are
  // done. stop_level 2 abandons running trials.
  Status Run(const std::atomic<int>& stop_level);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hpo::worker
