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

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

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
//             experiment ended) or PAUSE (the lease's stop_step). FailedPrecondition: the lease is not this
//             worker's any more.
//  Complete:  ends the trial; a failed trial's log_tail follows its reason.
//  Heartbeat: renews the worker and the given leases; a trial whose lease
//             cannot be renewed because it ended or moved on (pruned,
//             cancelled, lease lost or unknown) is listed in stop_trial_ids.
//  UploadCheckpoint: the first chunk names the worker, trial, step and
//             total size; every chunk carries at most kCheckpointChunkBytes;
//             the last one carries the SHA-256 (hex) and nothing may follow
//             it. It is stored only when all of it arrived and matched.
//  DownloadCheckpoint: the first chunk says the trial, step and size; the
//             last one carries no data and the SHA-256, sent only once the
//             server read every byte and they matched it (DATA_LOSS
//             otherwise).
//  Pause, Restart: see Engine::PauseTrial and Engine::RestartTrial.
//
// Thread-safe: it holds no mutable state; the Engine is thread-safe.
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
  ::grpc::Status UploadCheckpoint(::grpc::ServerContext* context,
                                  ::grpc::ServerReader<hpo::v1::CheckpointChunk>* reader,
                                  hpo::v1::UploadCheckpointResponse* response) override;
  ::grpc::Status DownloadCheckpoint(::grpc::ServerContext* context, const hpo::v1::DownloadCheckpointRequest* request,
                                    ::grpc::ServerWriter<hpo::v1::CheckpointChunk>* writer) override;

  // The two streaming RPCs over any stream of chunks: the overrides above
  // pass gRPC's own, fuzz/fuzz_worker.cc a reader and a writer of chunks it
  // decoded (gRPC's ServerReader and ServerWriter exist only inside a call).
  ::grpc::Status UploadCheckpointFrom(::grpc::ServerContext* context,
                                      ::grpc::ServerReaderInterface<hpo::v1::CheckpointChunk>* reader,
                                      hpo::v1::UploadCheckpointResponse* response);
  ::grpc::Status DownloadCheckpointTo(::grpc::ServerContext* context,
                                      const hpo::v1::DownloadCheckpointRequest* request,
                                      ::grpc::ServerWriterInterface<hpo::v1::CheckpointChunk>* writer);

 private:
  Status Authenticate(const ::grpc::ServerContext& context) const;
  Status DoRegister(const hpo::v1::RegisterRequest& request, hpo::v1::RegisterResponse& response);
  Status DoLease(const hpo::v1::LeaseRequest& request, hpo::v1::LeaseResponse& response);
  Status DoReport(const hpo::v1::ReportRequest& request, hpo::v1::ReportResponse& response);
  Status DoComplete(const hpo::v1::CompleteRequest& request);
  Status DoHeartbeat(const hpo::v1::HeartbeatRequest& request,
                     hpo::v1::HeartbeatResponse& response);
  Status DoUploadCheckpoint(::grpc::ServerReaderInterface<hpo::v1::CheckpointChunk>& reader,
                            hpo::v1::UploadCheckpointResponse& response);
  Status DoDownloadCheckpoint(const hpo::v1::DownloadCheckpointRequest& request,
                              ::grpc::ServerWriterInterface<hpo::v1::CheckpointChunk>& writer);

  Engine& engine_;
  const WorkerServiceOptions options_;
  const std::string expected_token_;  // empty: no auth
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
  static Result<std::unique_ptr<GrpcServer>> Start(const std::string& address, ::grpc::Service* service,
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
