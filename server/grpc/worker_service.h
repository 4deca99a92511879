// The gRPC transport for workers: hpo.v1.WorkerService (proto/hpo/v1/
// worker.proto) on top of the Engine, and a small server to run it.
//
// All gRPC code of the server sits under server/grpc/ (the Status
// conversion, shared with the worker, in proto/); the Engine knows
// nothing of it. Errors are hpo::Status until the last line of each RPC,
// where ToGrpcStatus (proto/grpc_status.h) converts them.
//
// Include this only where a gRPC server is built (the server's main, tests):
// it pulls in the generated gRPC headers.
#pragma once

#include <grpcpp/server.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"
#include "hpo/v1/worker.grpc.pb.h"
#include "server/engine/engine.h"

namespace hpo::server {

// The most data one CheckpointChunk carries (worker.proto).
inline constexpr size_t kCheckpointChunkBytes = size_t{1} << 20;

struct WorkerServiceOptions {
  // When non-empty, every RPC needs the metadata "authorization: Bearer
  // <token>"; otherwise it fails with UNAUTHENTICATED. Never logged or echoed.
  std::string token;
  // What Lease answers when there is nothing to run now.
  int64_t retry_after_ms = 1000;
  // The longest a Lease with nothing to run waits for work
  // (LeaseRequest.max_wait_ms, bounded by this), and how many may wait at
  // once: each holds one of gRPC's threads, so past the bound a lease is
  // answered at once, as without a wait.
  int64_t max_lease_wait_ms = 5000;
  int max_waiting_leases = 256;
  // The server's own deadline for a checkpoint upload, whatever deadline
  // (or none) its worker set: upload_deadline_base plus its announced size
  // at upload_min_bytes_per_sec, counted from its first chunk; a stream
  // that sends no first chunk gets upload_deadline_base alone. Twice what
  // hpo-worker gives its own uploads (60 s plus the size at 1 MiB/s), so
  // a slow worker gives up, and retries, before the server ends its upload.
  std::chrono::milliseconds upload_deadline_base{120'000};
  int64_t upload_min_bytes_per_sec = int64_t{512} << 10;
  // How often the uploads in flight are checked against their deadline and
  // their worker's lease (one read of the trial per upload).
  std::chrono::milliseconds upload_check_interval{1000};
};

// The checkpoint uploads in flight, one entry per UploadCheckpoint stream,
// and the rules that bound them in number and in time:
//  * at most one per trial: the newer upload of a trial ends the older
//    (CANCELLED). Replacing rather than refusing, because only the worker
//    that holds the trial's lease gets this far, and its newer upload is the
//    one it still waits for: the older is most likely one it gave up on,
//    whose stream the server has not seen end (no client deadline, a dead
//    peer without keepalive). Refusing would make that worker wait for the
//    stale upload's deadline.
//  * each ends at its deadline (WorkerServiceOptions: DEADLINE_EXCEEDED);
//  * each ends when its worker's lease of the trial ends (expired,
//    reclaimed, the trial finished or moved on: FAILED_PRECONDITION),
//    checked every upload_check_interval.
// Ending a stream cancels its call (grpc::ServerContext::TryCancel), which
// wakes its handler from a Read that would otherwise wait for the peer; the
// handler then abandons the upload (the artifact store removes what was
// written) and the trial keeps its previous checkpoint. An upload that
// began its commit is left to finish: a commit replaces the trial's
// checkpoint whole or not at all.
//
// Thread-safe. A checker thread runs from construction to destruction.
class CheckpointUploads {
 public:
  // OK while worker `worker_id` holds the lease of trial `trial_id`;
  // FailedPrecondition or NotFound when that lease ended or the trial is
  // gone. Other errors (a store that cannot be read) end nothing.
  using LeaseCheck = std::function<Status(store::Id trial_id, store::Id worker_id)>;
  CheckpointUploads(const WorkerServiceOptions& options, LeaseCheck lease_check);
  ~CheckpointUploads();
  CheckpointUploads(const CheckpointUploads&) = delete;
  CheckpointUploads& operator=(const CheckpointUploads&) = delete;

  struct Entry;
  // One stream's entry; destroying it removes it (before the call's
  // context goes: keep it inside the handler).
  class Ticket {
   public:
    ~Ticket();
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    // The engine accepted the upload's first chunk: from here on it is
    // trial `trial_id`'s upload in flight (any other ends), with its
    // deadline from `total_bytes`, and it ends with `worker_id`'s lease.
    void Start(store::Id trial_id, store::Id worker_id, int64_t total_bytes);
    // Why the server ended this stream, once it did.
    std::optional<Status> Ended() const;
    // Called before the commit: its error when the stream was ended;
    // otherwise nothing ends it from here on.
    Status BeginCommit();

   private:
    friend class CheckpointUploads;
    Ticket(CheckpointUploads& owner, std::shared_ptr<Entry> entry)
        : owner_(owner), entry_(std::move(entry)) {}
    CheckpointUploads& owner_;
    std::shared_ptr<Entry> entry_;
  };
  // A new stream, whose call `context` (null: none to cancel, as for a
  // stream the fuzzer feeds) is cancelled when the stream is ended. It
  // gets upload_deadline_base until Start.
  std::unique_ptr<Ticket> Track(::grpc::ServerContext* context);

  // Streams in flight now, for tests and diagnostics.
  size_t InFlight() const;

 private:
  // Ends `e` with `why` unless it ended or began its commit.
  void End(Entry& e, Status why) HPO_REQUIRES(mu_);
  void CheckLoop();
  void CheckOnce();

  const WorkerServiceOptions options_;
  const LeaseCheck lease_check_;
  mutable Mutex mu_;
  CondVar wake_;
  bool stopping_ HPO_GUARDED_BY(mu_) = false;
  uint64_t next_serial_ HPO_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, std::shared_ptr<Entry>> entries_ HPO_GUARDED_BY(mu_);  // by serial
  std::map<store::Id, uint64_t> by_trial_ HPO_GUARDED_BY(mu_);  // the serial of each trial's upload
  std::thread checker_;
};

// The worker protocol's server side: each RPC translates its request for
// the Engine (which validates, authenticates the worker's session and keeps
// every limit; see server/engine/engine.h) and the answer back. Beyond that:
//  Register:  returns the worker's id, its device ids in request order,
//             its session secret and, for a new identity, its identity
//             secret (Engine::RegisterWorker).
//  Lease:     a trial with everything needed to run it, or retry_after_ms.
//             A command's argv has {param}, {trial_id} and {steps} filled in
//             (strings without JSON quotes, numbers as JSON prints them);
//             {step} is left for the worker, and a placeholder naming a
//             parameter this trial does not have (another space's, an
//             inactive conditional one) is left as written.
//  Report:    one step; the answer is CONTINUE, PRUNE, CANCEL (the
//             experiment ended) or PAUSE (the lease's stop_step). FailedPrecondition: the lease is
//             not this worker's any more.
//  Complete:  ends the trial; a failed trial's log_tail follows its reason.
//  Heartbeat: renews the worker and the given leases; a trial whose lease
//             cannot be renewed because it ended or moved on (pruned,
//             cancelled, lease lost or unknown) is listed in stop_trial_ids.
//  UploadCheckpoint: the first chunk names the worker, trial, step and
//             total size; every chunk carries at most kCheckpointChunkBytes;
//             the last one carries the SHA-256 (hex) and nothing may follow
//             it. It is stored only when all of it arrived and matched.
//             Bounded by CheckpointUploads: one per trial, a deadline, the
//             lease.
//  DownloadCheckpoint: the first chunk says the trial, step and size; the
//             last one carries no data and the SHA-256, sent only once the
//             server read every byte and they matched it (DATA_LOSS
//             otherwise).
//  Pause, Restart: see Engine::PauseTrial and Engine::RestartTrial.
//  Leave:     the worker stops: gone now, its leases requeued
//             (Engine::LeaveWorker); their ids are in requeued_trial_ids.
//
// Thread-safe: its only mutable state is the uploads in flight
// (CheckpointUploads); the Engine is thread-safe.
class WorkerServiceImpl final : public hpo::v1::WorkerService::Service {
 public:
  // `engine` must outlive the service.
  WorkerServiceImpl(Engine& engine, WorkerServiceOptions options);

  ::grpc::Status Register(::grpc::ServerContext* context, const hpo::v1::RegisterRequest* request,
                          hpo::v1::RegisterResponse* response) override;
  ::grpc::Status Lease(::grpc::ServerContext* context, const hpo::v1::LeaseRequest* request,
                       hpo::v1::LeaseResponse* response) override;
  ::grpc::Status Report(::grpc::ServerContext* context, const hpo::v1::ReportRequest* request,
                        hpo::v1::ReportResponse* response) override;
  ::grpc::Status Complete(::grpc::ServerContext* context, const hpo::v1::CompleteRequest* request,
                          hpo::v1::CompleteResponse* response) override;
  ::grpc::Status Heartbeat(::grpc::ServerContext* context, const hpo::v1::HeartbeatRequest* request,
                           hpo::v1::HeartbeatResponse* response) override;
  // Promotion-type early stopping: checkpoints and pauses.
  ::grpc::Status Pause(::grpc::ServerContext* context, const hpo::v1::PauseRequest* request,
                       hpo::v1::PauseResponse* response) override;
  ::grpc::Status Restart(::grpc::ServerContext* context, const hpo::v1::RestartRequest* request,
                         hpo::v1::RestartResponse* response) override;
  ::grpc::Status Leave(::grpc::ServerContext* context, const hpo::v1::LeaveRequest* request,
                       hpo::v1::LeaveResponse* response) override;
  ::grpc::Status UploadCheckpoint(::grpc::ServerContext* context,
                                  ::grpc::ServerReader<hpo::v1::CheckpointChunk>* reader,
                                  hpo::v1::UploadCheckpointResponse* response) override;
  ::grpc::Status DownloadCheckpoint(
      ::grpc::ServerContext* context, const hpo::v1::DownloadCheckpointRequest* request,
      ::grpc::ServerWriter<hpo::v1::CheckpointChunk>* writer) override;

  // The two streaming RPCs over any stream of chunks: the overrides above
  // pass gRPC's own, fuzz/fuzz_worker.cc a reader and a writer of chunks it
  // decoded (gRPC's ServerReader and ServerWriter exist only inside a call).
  ::grpc::Status UploadCheckpointFrom(
      ::grpc::ServerContext* context,
      ::grpc::ServerReaderInterface<hpo::v1::CheckpointChunk>* reader,
      hpo::v1::UploadCheckpointResponse* response);
  ::grpc::Status DownloadCheckpointTo(
      ::grpc::ServerContext* context, const hpo::v1::DownloadCheckpointRequest* request,
      ::grpc::ServerWriterInterface<hpo::v1::CheckpointChunk>* writer);

  // Lease calls waiting for work now (LeaseRequest.max_wait_ms).
  int waiting_leases() const { return waiting_leases_.load(); }

 private:
  Status Authenticate(const ::grpc::ServerContext& context) const;
  Status DoRegister(const hpo::v1::RegisterRequest& request, hpo::v1::RegisterResponse& response);
  // `context` ends a long poll early: the call was cancelled.
  Status DoLease(const hpo::v1::LeaseRequest& request, hpo::v1::LeaseResponse& response,
                 ::grpc::ServerContext* context);
  Status DoReport(const hpo::v1::ReportRequest& request, hpo::v1::ReportResponse& response);
  Status DoComplete(const hpo::v1::CompleteRequest& request);
  Status DoHeartbeat(const hpo::v1::HeartbeatRequest& request,
                     hpo::v1::HeartbeatResponse& response);
  Status DoUploadCheckpoint(::grpc::ServerContext* context,
                            ::grpc::ServerReaderInterface<hpo::v1::CheckpointChunk>& reader,
                            hpo::v1::UploadCheckpointResponse& response);
  Status DoDownloadCheckpoint(const hpo::v1::DownloadCheckpointRequest& request,
                              ::grpc::ServerWriterInterface<hpo::v1::CheckpointChunk>& writer);

  Engine& engine_;
  const WorkerServiceOptions options_;
  const std::string expected_token_;  // empty: no auth
  CheckpointUploads uploads_;
  std::atomic<int> waiting_leases_{0};  // Leases waiting for work now (max_waiting_leases)
};

// The protocol's Trial for a lease, as Lease answers it: the trial's
// fields, its executor (a command's argv with its placeholders filled in,
// see above), its seed, and stop_step / resume_step. DataLoss when what is
// stored for it is not readable.
Status FillTrial(const Lease& a, hpo::v1::Trial& t);

// TLS for the gRPC server: PEM files of the certificate chain and its key.
// Both empty: plaintext.
struct GrpcTlsFiles {
  std::string cert_file;
  std::string key_file;
};

// A running gRPC server for one or more services.
class GrpcServer {
 public:
  // Listens on `address` ("host:port"; port 0 picks a free one, e.g.
  // "127.0.0.1:0") and starts serving `service`, which must outlive the
  // server. Unavailable, naming the address, when it cannot listen there
  // (malformed, in use, not a local address); InvalidArgument, naming the
  // file, when a TLS file cannot be read or only one is given.
  static Result<std::unique_ptr<GrpcServer>> Start(const std::string& address,
                                                   ::grpc::Service* service,
                                                   const GrpcTlsFiles& tls = {});

  // Shuts down (with no further deadline) unless Shutdown was called.
  ~GrpcServer();
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  // The port it listens on (the chosen one when started with port 0).
  int port() const { return port_; }

  // Stops taking calls, lets calls in flight finish for up to `deadline`,
  // then cancels the rest, and returns when all are done. Idempotent and
  // thread-safe (a signal-handling thread may call it while main waits).
  void Shutdown(std::chrono::milliseconds deadline);

 private:
  GrpcServer(std::unique_ptr<::grpc::Server> server, int port);

  std::unique_ptr<::grpc::Server> server_;
  int port_ = 0;
  std::once_flag shutdown_once_;
};

}  // namespace hpo::server
