#include "server/grpc/worker_service.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json_limits.h"
#include "common/token.h"
#include "proto/grpc_status.h"
#include "server/engine/trial_run.h"

namespace hpo::server {

using nlohmann::json;
using store::Id;

namespace {

// Runs an RPC body after authentication. The catch keeps a bug that throws
// (e.g. from a JSON library) from terminating the whole server: a sync gRPC
// handler has no one above it to catch.
template <typename Body>
::grpc::Status Serve(const Status& auth, Body&& body) {
  if (!auth.ok()) return ToGrpcStatus(auth);
  try {
    return ToGrpcStatus(body());
  } catch (const std::exception& e) {
    return ToGrpcStatus(Status::Internal(std::string("unexpected error: ") + e.what()));
  }
}

// The proto's device, as the engine takes it; only the kind is checked
// here (the rest is the engine's to judge).
Result<store::DeviceInfo> ToDeviceInfo(const hpo::v1::Device& d, const std::string& path) {
  if (d.kind() != hpo::v1::DEVICE_KIND_CPU && d.kind() != hpo::v1::DEVICE_KIND_CUDA) {
    return Status::InvalidArgument(path + ".kind: must be DEVICE_KIND_CPU or DEVICE_KIND_CUDA");
  }
  store::DeviceInfo info;
  info.ordinal = d.ordinal();
  info.kind =
      d.kind() == hpo::v1::DEVICE_KIND_CUDA ? store::DeviceKind::kCuda : store::DeviceKind::kCpu;
  info.name = d.name();
  info.cores = d.cores();
  info.memory_bytes = d.memory_bytes();
  info.benchmark_gflops = d.benchmark_gflops();
  return info;
}

Result<json> ParseStoredObject(const std::string& text, Id trial_id, const char* what) {
  // Written by the server, so no size limit; the nesting limit still keeps
  // the dump() of each value below off a deep stored value.
  auto j = ParseJson(text, what, JsonLimits{kMaxJsonDepth, SIZE_MAX, SIZE_MAX});
  if (!j.ok() || !j->is_object()) {
    return Status::DataLoss("trial " + std::to_string(trial_id) + " has stored " + what +
                            " that are not a JSON object" +
                            (j.ok() ? "" : " (" + j.status().message() + ")"));
  }
  return std::move(j).value();
}

// Values are JSON-encoded by the protocol; a worker that sent a bare word
// ("cuda:0" rather than "\"cuda:0\"") still gets it recorded, as a string.
// JSON beyond the limits of json_limits.h (e.g. nested 100k deep) is an
// error naming the key, before anything copies or serializes it.
Result<json> SystemToJson(const hpo::v1::SystemSetting& s, const std::string& what = "system") {
  json out = json::object();
  for (const auto& [k, v] : s.values()) {
    // (A key too long is refused by the engine; here it only names the value.)
    const std::string field = what + "." + (k.size() > 64 ? k.substr(0, 64) + "..." : k);
    HPO_ASSIGN_OR_RETURN(out[k], ParseJsonOrString(v, field));
  }
  return out;
}

json MetricsToJson(const google::protobuf::Map<std::string, double>& m) {
  json out = json::object();
  for (const auto& [k, v] : m) out[k] = v;
  return out;
}

// CheckpointUploads' lease check: the upload's worker still holds the
// trial's lease (the trial leased or running under it, and not expired by
// the engine's clock, which is the store's), as CheckpointUpload::Commit
// will require.
Status LeaseStillHeld(Engine& engine, Id trial_id, Id worker_id) {
  HPO_ASSIGN_OR_RETURN(const store::TrialRecord t, engine.GetTrial(trial_id));
  const std::string owner = Engine::WorkerOwner(worker_id);
  const bool active =
      t.state == store::TrialState::kLeased || t.state == store::TrialState::kRunning;
  if (!active || t.lease_owner != owner) {
    return Status::FailedPrecondition("trial " + std::to_string(trial_id) + " is not leased to '" +
                                      owner + "' any more (it is " +
                                      std::string(store::ToString(t.state)) + ")");
  }
  const auto& clock = engine.options().clock;
  const int64_t now = clock ? clock()
                            : std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
  if (t.lease_expires_ms && *t.lease_expires_ms <= now) {
    return Status::FailedPrecondition("the lease of trial " + std::to_string(trial_id) + " to '" +
                                      owner + "' expired");
  }
  return Status::OK();
}

using UploadClock = std::chrono::steady_clock;

// An upload's deadline from its announced size (see WorkerServiceOptions),
// in floating point so that no size overflows it, and at most a week.
UploadClock::duration UploadDeadline(const WorkerServiceOptions& o, int64_t total_bytes) {
  const double rate = static_cast<double>(std::max<int64_t>(1, o.upload_min_bytes_per_sec));
  const double seconds = std::chrono::duration<double>(o.upload_deadline_base).count() +
                         static_cast<double>(std::max<int64_t>(0, total_bytes)) / rate;
  return std::chrono::duration_cast<UploadClock::duration>(
      std::chrono::duration<double>(std::min(seconds, 7.0 * 24 * 3600)));
}

std::string Seconds(UploadClock::duration d) {
  const double s = std::chrono::duration<double>(d).count();
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}

}  // namespace

// CheckpointUploads -------------------------------------------------------

// Every field but `serial` and `context` is guarded by the owner's mu_.
struct CheckpointUploads::Entry {
  uint64_t serial = 0;
  // Valid while the entry is in entries_: its Ticket removes it, under mu_,
  // before the handler returns and gRPC destroys the context.
  ::grpc::ServerContext* context = nullptr;
  Id trial_id = 0;  // 0 until Ticket::Start
  Id worker_id = 0;
  UploadClock::time_point started;
  UploadClock::time_point deadline;
  std::optional<Status> ended;
  bool committing = false;
};

CheckpointUploads::CheckpointUploads(const WorkerServiceOptions& options, LeaseCheck lease_check)
    : options_(options), lease_check_(std::move(lease_check)), checker_([this] { CheckLoop(); }) {}

CheckpointUploads::~CheckpointUploads() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    wake_.NotifyAll();
  }
  checker_.join();
}

std::unique_ptr<CheckpointUploads::Ticket> CheckpointUploads::Track(
    ::grpc::ServerContext* context) {
  auto e = std::make_shared<Entry>();
  e->context = context;
  e->started = UploadClock::now();
  e->deadline = e->started + options_.upload_deadline_base;
  MutexLock lock(mu_);
  e->serial = next_serial_++;
  entries_[e->serial] = e;
  return std::unique_ptr<Ticket>(new Ticket(*this, std::move(e)));
}

size_t CheckpointUploads::InFlight() const {
  MutexLock lock(mu_);
  return entries_.size();
}

CheckpointUploads::Ticket::~Ticket() {
  MutexLock lock(owner_.mu_);
  owner_.entries_.erase(entry_->serial);
  if (const auto it = owner_.by_trial_.find(entry_->trial_id);
      it != owner_.by_trial_.end() && it->second == entry_->serial) {
    owner_.by_trial_.erase(it);
  }
}

void CheckpointUploads::Ticket::Start(Id trial_id, Id worker_id, int64_t total_bytes) {
  MutexLock lock(owner_.mu_);
  Entry& e = *entry_;
  e.trial_id = trial_id;
  e.worker_id = worker_id;
  e.deadline = e.started + UploadDeadline(owner_.options_, total_bytes);
  const auto [it, first] = owner_.by_trial_.try_emplace(trial_id, e.serial);
  if (first) return;
  if (const auto older = owner_.entries_.find(it->second); older != owner_.entries_.end()) {
    owner_.End(*older->second,
               Status::Cancelled("checkpoint upload of trial " + std::to_string(trial_id) +
                                 ": a newer upload of the trial replaced it; nothing of this "
                                 "one was stored"));
  }
  it->second = e.serial;
}

std::optional<Status> CheckpointUploads::Ticket::Ended() const {
  MutexLock lock(owner_.mu_);
  return entry_->ended;
}

Status CheckpointUploads::Ticket::BeginCommit() {
  MutexLock lock(owner_.mu_);
  if (entry_->ended) return *entry_->ended;
  entry_->committing = true;
  return Status::OK();
}

void CheckpointUploads::End(Entry& e, Status why) {
  if (e.ended || e.committing) return;
  e.ended = std::move(why);
  // A context without a call (the fuzzer's) has nothing to cancel: its
  // handler sees `ended` after its next chunk.
  if (e.context != nullptr && e.context->c_call() != nullptr) e.context->TryCancel();
}

void CheckpointUploads::CheckLoop() {
  struct Leased {
    std::shared_ptr<Entry> entry;
    Id trial_id, worker_id;
  };
  for (;;) {
    std::vector<Leased> leased;
    {
      MutexLock lock(mu_);
      const auto until = UploadClock::now() + options_.upload_check_interval;
      while (!stopping_ && UploadClock::now() < until) wake_.WaitUntil(mu_, until);
      if (stopping_) return;
      const auto now = UploadClock::now();
      for (auto& [serial, e] : entries_) {
        if (e->ended || e->committing) continue;
        if (now >= e->deadline) {
          const std::string what =
              e->trial_id == 0
                  ? std::string("checkpoint upload: no first chunk")
                  : "checkpoint upload of trial " + std::to_string(e->trial_id) + ": not done";
          End(*e, Status::DeadlineExceeded(what + " within the server's deadline of " +
                                           Seconds(e->deadline - e->started) +
                                           " s; nothing was stored"));
        } else if (e->trial_id != 0) {
          leased.push_back({e, e->trial_id, e->worker_id});
        }
      }
    }
    // Read without the lock: a slow store holds up no upload.
    for (const Leased& l : leased) {
      const Status held = lease_check_(l.trial_id, l.worker_id);
      if (!held.IsFailedPrecondition() && !held.IsNotFound()) continue;
      MutexLock lock(mu_);
      if (entries_.count(l.entry->serial) == 0)
        continue;  // done meanwhile: its context may be gone
      End(*l.entry,
          Status::FailedPrecondition("checkpoint upload of trial " + std::to_string(l.trial_id) +
                                     " ended with the worker's lease: " + held.message() +
                                     "; nothing was stored"));
    }
  }
}

Status FillTrial(const Lease& a, hpo::v1::Trial& t) {
  const ExperimentSpec& spec = *a.spec;
  const store::TrialRecord& rec = a.trial;
  HPO_ASSIGN_OR_RETURN(json params, ParseStoredObject(rec.params_json, rec.id, "params"));
  HPO_ASSIGN_OR_RETURN(json system,
                       ParseStoredObject(rec.system_params_json, rec.id, "system params"));
  t.set_trial_id(rec.id);
  t.set_experiment_id(rec.experiment_id);
  t.set_space(a.space);
  t.set_params_json(rec.params_json);
  auto& values = *t.mutable_system()->mutable_values();
  for (auto it = system.begin(); it != system.end(); ++it) values[it.key()] = it->dump();

  switch (spec.executor) {
    case ExperimentSpec::ExecutorKind::kBuiltin: {
      auto& b = *t.mutable_executor()->mutable_builtin();
      b.set_trainer(spec.trainer);
      auto& args = *b.mutable_args();
      for (auto it = spec.trainer_args.begin(); it != spec.trainer_args.end(); ++it) {
        args[it.key()] = it->dump();
      }
      break;
    }
    case ExperimentSpec::ExecutorKind::kCommand: {
      auto& c = *t.mutable_executor()->mutable_command();
      for (auto& arg : CommandArgv(spec, rec.id, params, system)) c.add_argv(std::move(arg));
      for (const auto& [k, v] : spec.env) (*c.mutable_env())[k] = v;
      c.set_timeout_ms(spec.timeout_s ? *spec.timeout_s * 1000 : 0);
      break;
    }
    case ExperimentSpec::ExecutorKind::kClient:
      return Status::Internal("trial " + std::to_string(rec.id) +
                              " belongs to an ask/tell experiment but was leased to a worker");
  }
  t.set_max_steps(spec.steps_per_trial);
  // Promotion-type early stopping: where this lease pauses, and the
  // checkpoint it resumes from.
  t.set_stop_step(rec.stop_step.value_or(0));
  t.set_resume_step(rec.resume_step);
  t.set_attempt(rec.attempt);
  t.set_number(rec.number);
  t.set_seed(TrialSeed(spec, rec.number));
  t.set_objective_metric(spec.metric);
  return Status::OK();
}

WorkerServiceImpl::WorkerServiceImpl(Engine& engine, WorkerServiceOptions options)
    : engine_(engine),
      options_(std::move(options)),
      expected_token_(options_.token),
      uploads_(options_, [&engine](Id trial_id, Id worker_id) {
        return LeaseStillHeld(engine, trial_id, worker_id);
      }) {}

Status WorkerServiceImpl::Authenticate(const ::grpc::ServerContext& context) const {
  if (expected_token_.empty()) return Status::OK();
  bool ok = false;
  const auto [begin, end] = context.client_metadata().equal_range("authorization");
  for (auto it = begin; it != end; ++it) {
    const auto given = BearerToken(std::string_view(it->second.data(), it->second.size()));
    ok = (given && TokenEquals(*given, expected_token_)) || ok;
  }
  // The same words for a missing and a wrong token: neither says which.
  if (!ok) return Status::Unauthenticated("missing or invalid bearer token");
  return Status::OK();
}

::grpc::Status WorkerServiceImpl::Register(::grpc::ServerContext* context,
                                           const hpo::v1::RegisterRequest* request,
                                           hpo::v1::RegisterResponse* response) {
  return Serve(Authenticate(*context), [&] { return DoRegister(*request, *response); });
}

::grpc::Status WorkerServiceImpl::Lease(::grpc::ServerContext* context,
                                        const hpo::v1::LeaseRequest* request,
                                        hpo::v1::LeaseResponse* response) {
  return Serve(Authenticate(*context), [&] { return DoLease(*request, *response, context); });
}

::grpc::Status WorkerServiceImpl::Report(::grpc::ServerContext* context,
                                         const hpo::v1::ReportRequest* request,
                                         hpo::v1::ReportResponse* response) {
  return Serve(Authenticate(*context), [&] { return DoReport(*request, *response); });
}

::grpc::Status WorkerServiceImpl::Complete(::grpc::ServerContext* context,
                                           const hpo::v1::CompleteRequest* request,
                                           hpo::v1::CompleteResponse* /*response*/) {
  return Serve(Authenticate(*context), [&] { return DoComplete(*request); });
}

::grpc::Status WorkerServiceImpl::Heartbeat(::grpc::ServerContext* context,
                                            const hpo::v1::HeartbeatRequest* request,
                                            hpo::v1::HeartbeatResponse* response) {
  return Serve(Authenticate(*context), [&] { return DoHeartbeat(*request, *response); });
}

::grpc::Status WorkerServiceImpl::Pause(::grpc::ServerContext* context,
                                        const hpo::v1::PauseRequest* request,
                                        hpo::v1::PauseResponse* /*response*/) {
  return Serve(Authenticate(*context), [&] {
    return engine_.PauseTrial({request->worker_id(), request->session()}, request->trial_id(),
                              request->step(), request->checkpoint_uploaded());
  });
}

::grpc::Status WorkerServiceImpl::Restart(::grpc::ServerContext* context,
                                          const hpo::v1::RestartRequest* request,
                                          hpo::v1::RestartResponse* /*response*/) {
  return Serve(Authenticate(*context), [&] {
    return engine_.RestartTrial({request->worker_id(), request->session()}, request->trial_id(),
                                request->reason());
  });
}

::grpc::Status WorkerServiceImpl::Leave(::grpc::ServerContext* context,
                                        const hpo::v1::LeaveRequest* request,
                                        hpo::v1::LeaveResponse* response) {
  return Serve(Authenticate(*context), [&]() -> Status {
    HPO_ASSIGN_OR_RETURN(const std::vector<store::Id> requeued,
                         engine_.LeaveWorker({request->worker_id(), request->session()}));
    for (const store::Id id : requeued) response->add_requeued_trial_ids(id);
    return Status::OK();
  });
}

::grpc::Status WorkerServiceImpl::UploadCheckpoint(
    ::grpc::ServerContext* context, ::grpc::ServerReader<hpo::v1::CheckpointChunk>* reader,
    hpo::v1::UploadCheckpointResponse* response) {
  return UploadCheckpointFrom(context, reader, response);
}

::grpc::Status WorkerServiceImpl::DownloadCheckpoint(
    ::grpc::ServerContext* context, const hpo::v1::DownloadCheckpointRequest* request,
    ::grpc::ServerWriter<hpo::v1::CheckpointChunk>* writer) {
  return DownloadCheckpointTo(context, request, writer);
}

::grpc::Status WorkerServiceImpl::UploadCheckpointFrom(
    ::grpc::ServerContext* context, ::grpc::ServerReaderInterface<hpo::v1::CheckpointChunk>* reader,
    hpo::v1::UploadCheckpointResponse* response) {
  return Serve(Authenticate(*context),
               [&] { return DoUploadCheckpoint(context, *reader, *response); });
}

::grpc::Status WorkerServiceImpl::DownloadCheckpointTo(
    ::grpc::ServerContext* context, const hpo::v1::DownloadCheckpointRequest* request,
    ::grpc::ServerWriterInterface<hpo::v1::CheckpointChunk>* writer) {
  return Serve(Authenticate(*context), [&] { return DoDownloadCheckpoint(*request, *writer); });
}

Status WorkerServiceImpl::DoUploadCheckpoint(
    ::grpc::ServerContext* context, ::grpc::ServerReaderInterface<hpo::v1::CheckpointChunk>& reader,
    hpo::v1::UploadCheckpointResponse& response) {
  // Before the first Read, so that a stream that never sends one ends too.
  const std::unique_ptr<CheckpointUploads::Ticket> ticket = uploads_.Track(context);
  hpo::v1::CheckpointChunk chunk;
  if (!reader.Read(&chunk)) {
    if (auto ended = ticket->Ended()) return *ended;
    return Status::InvalidArgument("UploadCheckpoint: the stream ended before its first chunk");
  }
  const Id trial_id = chunk.trial_id();
  HPO_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointUpload> upload,
                       engine_.BeginCheckpointUpload({chunk.worker_id(), chunk.session()}, trial_id,
                                                     chunk.step(), chunk.total_bytes()));
  // Only now, with the caller known to hold the trial's lease, may this
  // upload end another of the same trial.
  ticket->Start(trial_id, chunk.worker_id(), chunk.total_bytes());
  int64_t bytes = 0;
  std::string sha256;
  for (int64_t index = 0;; ++index) {
    const std::string where = "chunks[" + std::to_string(index) + "]";
    if (index > 0 && chunk.trial_id() != 0 && chunk.trial_id() != trial_id) {
      return Status::InvalidArgument(where + ".trial_id: " + std::to_string(chunk.trial_id()) +
                                     ", but the upload is of trial " + std::to_string(trial_id));
    }
    if (chunk.data().size() > kCheckpointChunkBytes) {
      return Status::InvalidArgument(where + ".data: " + std::to_string(chunk.data().size()) +
                                     " bytes, over the limit of " +
                                     std::to_string(kCheckpointChunkBytes) + " per chunk");
    }
    HPO_RETURN_IF_ERROR(upload->Append(chunk.data()));
    bytes += static_cast<int64_t>(chunk.data().size());
    if (!chunk.sha256().empty()) sha256 = chunk.sha256();
    const bool more = reader.Read(&chunk);
    // Ended by the server (replaced, past its deadline, its lease gone):
    // that, not what the cancelled stream looks like, is why.
    if (auto ended = ticket->Ended()) return *ended;
    if (!more) break;
    if (!sha256.empty()) {
      return Status::InvalidArgument(
          where +
          ".sha256: set on a chunk that is not the last (only the last carries "
          "it); nothing was stored");
    }
  }
  // The worker stopped sending (it died, or gave up) before the last chunk:
  // the upload is abandoned and the trial keeps its previous checkpoint.
  if (sha256.empty()) {
    return Status::DataLoss(
        "checkpoint of trial " + std::to_string(trial_id) +
        ": the upload ended without the sha256 of its last chunk; nothing was stored");
  }
  HPO_RETURN_IF_ERROR(ticket->BeginCommit());
  HPO_RETURN_IF_ERROR(upload->Commit(sha256));
  response.set_bytes(bytes);
  return Status::OK();
}

Status WorkerServiceImpl::DoDownloadCheckpoint(
    const hpo::v1::DownloadCheckpointRequest& request,
    ::grpc::ServerWriterInterface<hpo::v1::CheckpointChunk>& writer) {
  HPO_ASSIGN_OR_RETURN(
      std::unique_ptr<store::CheckpointReader> reader,
      engine_.OpenCheckpoint({request.worker_id(), request.session()}, request.trial_id()));
  const store::CheckpointInfo& info = reader->info();
  for (bool first = true;; first = false) {
    // The reader checks the bytes as they come; the checksum goes out only
    // after they all matched it.
    HPO_ASSIGN_OR_RETURN(std::string data, reader->Read(kCheckpointChunkBytes));
    hpo::v1::CheckpointChunk chunk;
    if (first) {
      chunk.set_trial_id(request.trial_id());
      chunk.set_step(info.step);
      chunk.set_total_bytes(info.size_bytes);
    }
    const bool last = data.empty();
    if (last) chunk.set_sha256(info.sha256);
    chunk.set_data(std::move(data));
    if (!writer.Write(chunk)) return Status::Cancelled("the worker stopped reading the checkpoint");
    if (last) return Status::OK();
  }
}

Status WorkerServiceImpl::DoRegister(const hpo::v1::RegisterRequest& request,
                                     hpo::v1::RegisterResponse& response) {
  WorkerRegistration w;
  w.host = request.host();
  w.instance = request.instance();
  w.identity_secret = request.identity_secret();
  w.labels.insert(request.labels().begin(), request.labels().end());
  for (int i = 0; i < request.devices_size(); ++i) {
    HPO_ASSIGN_OR_RETURN(store::DeviceInfo d,
                         ToDeviceInfo(request.devices(i), "devices[" + std::to_string(i) + "]"));
    w.devices.push_back(std::move(d));
  }
  HPO_ASSIGN_OR_RETURN(RegisteredWorker registered, engine_.RegisterWorker(w));
  const store::WorkerRecord& rec = registered.worker;
  // Matched by ordinal rather than trusting the store to keep list order.
  std::map<int, Id> device_id_of_ordinal;
  for (const auto& d : rec.devices) device_id_of_ordinal[d.ordinal] = d.id;
  response.set_worker_id(rec.id);
  for (const auto& d : request.devices()) {
    auto it = device_id_of_ordinal.find(d.ordinal());
    if (it == device_id_of_ordinal.end()) {
      return Status::Internal("worker " + std::to_string(rec.id) +
                              " was stored without its device " + std::to_string(d.ordinal()));
    }
    response.add_device_ids(it->second);
  }
  response.set_lease_timeout_ms(engine_.options().worker_lease_ms);
  response.set_session(registered.session);
  response.set_identity_secret(registered.identity_secret);
  return Status::OK();
}

Status WorkerServiceImpl::DoLease(const hpo::v1::LeaseRequest& request,
                                  hpo::v1::LeaseResponse& response,
                                  ::grpc::ServerContext* context) {
  std::optional<std::vector<store::Id>> held;
  if (request.lists_held())
    held.emplace(request.held_trial_ids().begin(), request.held_trial_ids().end());
  const WorkerCaller caller{request.worker_id(), request.session()};
  // Read before the first try: a change between that try and the wait
  // below is then not missed.
  uint64_t epoch = engine_.WorkEpoch();
  HPO_ASSIGN_OR_RETURN(std::optional<server::Lease> a,
                       engine_.LeaseForWorker(caller, request.device_id(), held));
  const int64_t wait_ms = std::clamp<int64_t>(request.max_wait_ms(), 0, options_.max_lease_wait_ms);
  if (!a && wait_ms > 0) {
    // A long poll: wait for a change that may give this device work, and
    // ask again, until the request's wait is over. The held list was
    // applied by the first try.
    if (++waiting_leases_ <= options_.max_waiting_leases) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
      // In slices, so that a call the worker gave up on, or that the
      // server's shutdown cancelled, stops waiting within one.
      constexpr auto kSlice = std::chrono::milliseconds(250);
      while (!a && std::chrono::steady_clock::now() < deadline && !context->IsCancelled()) {
        const uint64_t now = engine_.WaitForWork(
            epoch, std::min(deadline, std::chrono::steady_clock::now() + kSlice));
        if (now == epoch) continue;  // a slice passed without a change
        epoch = now;
        auto again = engine_.LeaseForWorker(caller, request.device_id());
        if (!again.ok()) {
          --waiting_leases_;
          return again.status();
        }
        a = std::move(again).value();
      }
      --waiting_leases_;
      if (!a) {
        // It waited: ask again soon, the next wait starts at once.
        response.set_retry_after_ms(std::min<int64_t>(options_.retry_after_ms, 100));
        return Status::OK();
      }
    } else {
      --waiting_leases_;
    }
  }
  if (!a) {
    response.set_retry_after_ms(options_.retry_after_ms);
    return Status::OK();
  }
  HPO_RETURN_IF_ERROR(FillTrial(*a, *response.mutable_trial()));
  if (a->trial.lease_expires_ms) response.set_lease_expires_ms(*a->trial.lease_expires_ms);
  return Status::OK();
}

Status WorkerServiceImpl::DoReport(const hpo::v1::ReportRequest& request,
                                   hpo::v1::ReportResponse& response) {
  TrialReport r;
  r.trial_id = request.trial_id();
  r.step = request.step();
  r.metrics = MetricsToJson(request.metrics());
  r.samples_per_sec = request.samples_per_sec();
  HPO_ASSIGN_OR_RETURN(r.system, SystemToJson(request.system()));
  HPO_ASSIGN_OR_RETURN(r.applied, SystemToJson(request.applied(), "applied"));
  for (const auto& [name, change] : request.system_changes()) {
    // An unspecified or unknown (newer) value promises nothing: fixed.
    r.system_changes[name] =
        change == hpo::v1::SYSTEM_CHANGE_MID_TRIAL    ? scheduler::SystemChange::kMidTrial
        : change == hpo::v1::SYSTEM_CHANGE_AT_RESTART ? scheduler::SystemChange::kAtRestart
                                                      : scheduler::SystemChange::kFixed;
  }
  if (request.device_id() > 0) r.device_id = request.device_id();
  HPO_ASSIGN_OR_RETURN(ReportReply reply,
                       engine_.Report({request.worker_id(), request.session()}, std::move(r)));
  if (reply.decision == Decision::kContinue && reply.new_system) {
    response.set_decision(hpo::v1::DECISION_CHANGE_SYSTEM);
    for (auto it = reply.new_system->begin(); it != reply.new_system->end(); ++it) {
      (*response.mutable_new_system()->mutable_values())[it.key()] = it->dump();
    }
    return Status::OK();
  }
  switch (reply.decision) {
    case Decision::kContinue:
      response.set_decision(hpo::v1::DECISION_CONTINUE);
      break;
    case Decision::kPrune:
      response.set_decision(hpo::v1::DECISION_PRUNE);
      break;
    case Decision::kStop:
      response.set_decision(hpo::v1::DECISION_CANCEL);
      break;
    case Decision::kPause:
      response.set_decision(hpo::v1::DECISION_PAUSE);
      break;
  }
  return Status::OK();
}

Status WorkerServiceImpl::DoComplete(const hpo::v1::CompleteRequest& request) {
  return engine_.Complete({request.worker_id(), request.session()}, request.trial_id(),
                          request.failed(), MetricsToJson(request.final_metrics()),
                          request.reason(), request.log_tail());
}

Status WorkerServiceImpl::DoHeartbeat(const hpo::v1::HeartbeatRequest& request,
                                      hpo::v1::HeartbeatResponse& response) {
  const std::vector<Id> trial_ids(request.trial_ids().begin(), request.trial_ids().end());
  HPO_ASSIGN_OR_RETURN(const std::vector<Id> stop,
                       engine_.Heartbeat({request.worker_id(), request.session()}, trial_ids));
  for (const Id id : stop) response.add_stop_trial_ids(id);
  return Status::OK();
}

// GrpcServer -------------------------------------------------------------

GrpcServer::GrpcServer(std::unique_ptr<::grpc::Server> server, int port)
    : server_(std::move(server)), port_(port) {}

GrpcServer::~GrpcServer() { Shutdown(std::chrono::milliseconds(0)); }

namespace {

// Idle call threads the gRPC server keeps (see GrpcServer::Start).
constexpr int kMaxIdleCallThreads = 256;

Result<std::string> ReadPemFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::InvalidArgument(std::string("cannot read TLS ") + what + " file '" + path +
                                   "': " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return Status::InvalidArgument(std::string("TLS ") + what + " file '" + path + "' is not PEM");
  }
  return text.str();
}

}  // namespace

Result<std::unique_ptr<GrpcServer>> GrpcServer::Start(const std::string& address,
                                                      ::grpc::Service* service,
                                                      const GrpcTlsFiles& tls) {
  std::shared_ptr<::grpc::ServerCredentials> credentials = ::grpc::InsecureServerCredentials();
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return Status::InvalidArgument("gRPC over TLS needs both a certificate file and a key file");
  }
  if (!tls.cert_file.empty()) {
    ::grpc::SslServerCredentialsOptions ssl;
    ::grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    HPO_ASSIGN_OR_RETURN(pair.cert_chain, ReadPemFile(tls.cert_file, "certificate"));
    HPO_ASSIGN_OR_RETURN(pair.private_key, ReadPemFile(tls.key_file, "key"));
    ssl.pem_key_cert_pairs.push_back(std::move(pair));
    credentials = ::grpc::SslServerCredentials(ssl);
  }
  ::grpc::ServerBuilder builder;
  // gRPC turns SO_REUSEPORT on by default on Linux, so a second server on a
  // busy port would start and silently take half of the first one's calls.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // The sync server keeps at most MAX_POLLERS idle threads (gRPC's default
  // is 2) and ends any thread beyond that as soon as its call returns. A
  // fleet's calls wait on the store's group commit for milliseconds, so
  // dozens are in flight at once, and with the default nearly every call
  // started a thread and ended one (the server's CPU went to
  // clone, exit and unmapping stacks). Idle threads are kept up to a fleet's
  // usual concurrency; more calls still get threads, as before.
  builder.SetSyncServerOption(::grpc::ServerBuilder::SyncServerOption::MAX_POLLERS,
                              kMaxIdleCallThreads);
  int selected_port = 0;
  builder.AddListeningPort(address, credentials, &selected_port);
  builder.RegisterService(service);
  std::unique_ptr<::grpc::Server> server = builder.BuildAndStart();
  if (!server || selected_port == 0) {
    if (server) server->Shutdown();
    return Status::Unavailable("cannot listen on \"" + address +
                               "\": the address is malformed, not local, or in use");
  }
  return std::unique_ptr<GrpcServer>(new GrpcServer(std::move(server), selected_port));
}

void GrpcServer::Shutdown(std::chrono::milliseconds deadline) {
  std::call_once(shutdown_once_, [&] {
    server_->Shutdown(std::chrono::system_clock::now() + deadline);
    server_->Wait();
  });
}

}  // namespace hpo::server
