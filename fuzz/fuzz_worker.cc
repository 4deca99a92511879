// libFuzzer target: the worker protocol. Every WorkerService RPC, decoded
// from the input (the format is in fuzz/worker_world.h's comment), is called
// on the real WorkerServiceImpl - the handlers the gRPC server runs, with a
// ServerContext of their own - over an Engine on an in-memory SQLite store
// and a files artifact store. Each input starts from an empty world and
// keeps its state from call to call: the workers it registered (their ids
// and sessions fill in later requests), the trials it leased, the clock.
// The streaming RPCs get a reader of the chunks the input holds
// (UploadCheckpoint) and a writer that keeps what the server sends
// (DownloadCheckpoint).
//
// A crash is: an exception or a sanitizer report, INTERNAL or UNKNOWN from
// any call (a bug, never an answer to bad input: that is INVALID_ARGUMENT,
// NOT_FOUND, ...), DATA_LOSS from anything but an upload (the server wrote
// everything it reads back), an answer that breaks the protocol (a device id
// per device, a 64-character session, a trial with an id and a budget, a
// downloaded checkpoint whose bytes match its size and SHA-256), an event
// that cannot be written as JSON (the server publishes each one), or an
// experiment with more trials than its budget.
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "common/sha256.h"
#include "fuzz/worker_world.h"

namespace {

using namespace hpo;
using namespace hpo::fuzz_worker;
namespace fs = std::filesystem;
namespace v1 = hpo::v1;

// Fixed, so that an input sees the same times on every run.
constexpr int64_t kStartMs = 1'700'000'000'000;
std::atomic<int64_t> now_ms{kStartMs};

bool Verbose() {
  static const bool verbose = std::getenv("HPO_FUZZ_WORKER_VERBOSE") != nullptr;
  return verbose;
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_worker: %s\n", what.c_str());
  std::abort();
}

const char* CallName(int call) {
  static const char* kNames[] = {"Register",           "Lease",     "Report",  "Complete",
                                 "Heartbeat",          "Pause",     "Restart", "UploadCheckpoint",
                                 "DownloadCheckpoint", "TimePasses"};
  return kNames[call];
}

void Check(int call, const ::grpc::Status& s) {
  if (Verbose()) {
    std::fprintf(stderr, "  %s -> %d %s\n", CallName(call), static_cast<int>(s.error_code()),
                 s.error_message().substr(0, 200).c_str());
  }
  const auto code = s.error_code();
  if (code == ::grpc::StatusCode::INTERNAL || code == ::grpc::StatusCode::UNKNOWN ||
      (code == ::grpc::StatusCode::DATA_LOSS && call != kUpload)) {
    Fail(std::string(CallName(call)) + " answered " + std::to_string(static_cast<int>(code)) +
         ": " + s.error_message());
  }
}

// UploadCheckpoint's client stream: the chunks of the input, then its end.
class ChunkReader final : public ::grpc::ServerReaderInterface<v1::CheckpointChunk> {
 public:
  explicit ChunkReader(std::vector<v1::CheckpointChunk> chunks) : chunks_(std::move(chunks)) {}
  void SendInitialMetadata() override {}
  bool NextMessageSize(uint32_t* size) override {
    if (next_ >= chunks_.size()) return false;
    *size = static_cast<uint32_t>(chunks_[next_].ByteSizeLong());
    return true;
  }
  bool Read(v1::CheckpointChunk* msg) override {
    if (next_ >= chunks_.size()) return false;
    *msg = chunks_[next_++];
    return true;
  }

 private:
  std::vector<v1::CheckpointChunk> chunks_;
  size_t next_ = 0;
};

// DownloadCheckpoint's server stream: keeps every chunk; with stop_reading
// the worker is gone after the first.
class ChunkWriter final : public ::grpc::ServerWriterInterface<v1::CheckpointChunk> {
 public:
  explicit ChunkWriter(bool stop_reading) : stop_reading_(stop_reading) {}
  void SendInitialMetadata() override {}
  bool Write(const v1::CheckpointChunk& msg, ::grpc::WriteOptions) override {
    if (stop_reading_ && !chunks.empty()) return false;
    chunks.push_back(msg);
    return true;
  }
  std::vector<v1::CheckpointChunk> chunks;

 private:
  const bool stop_reading_;
};

struct Worker {
  int64_t id = 0;
  std::string session;
};

// Fills in the request's worker_id and session (see worker_world.h).
template <typename Request>
void FillIdentity(uint8_t op, const std::vector<Worker>& workers, Request& req) {
  if ((op & kAsSent) || workers.empty()) return;
  size_t i = workers.size() - 1;
  for (size_t j = 0; j < workers.size(); ++j) {
    if (workers[j].id == req.worker_id()) i = j;
  }
  req.set_worker_id(workers[i].id);
  std::string session = workers[i].session;
  if (op & kWrongSession) {
    if (workers.size() > 1) {
      session = workers[(i + 1) % workers.size()].session;
    } else if (!session.empty()) {
      session[0] = session[0] == '0' ? '1' : '0';
    }
  }
  req.set_session(session);
}

void CheckDownload(const v1::DownloadCheckpointRequest& req,
                   const std::vector<v1::CheckpointChunk>& chunks) {
  if (chunks.empty()) Fail("DownloadCheckpoint succeeded without a chunk");
  std::string data;
  for (const auto& c : chunks) data += c.data();
  const v1::CheckpointChunk& first = chunks.front();
  const v1::CheckpointChunk& last = chunks.back();
  if (first.trial_id() != req.trial_id())
    Fail("DownloadCheckpoint's first chunk names another trial");
  if (first.total_bytes() != static_cast<int64_t>(data.size())) {
    Fail("DownloadCheckpoint announced " + std::to_string(first.total_bytes()) +
         " bytes and sent " + std::to_string(data.size()));
  }
  if (!last.data().empty()) Fail("DownloadCheckpoint's last chunk carries data");
  if (last.sha256() != Sha256Hex(data))
    Fail("DownloadCheckpoint's sha256 does not match its bytes");
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    if (!chunks[i].sha256().empty()) Fail("DownloadCheckpoint sent a sha256 before its last chunk");
    if (chunks[i].data().size() > server::kCheckpointChunkBytes)
      Fail("DownloadCheckpoint sent a chunk over 1 MiB");
  }
}

void CheckLease(const v1::LeaseResponse& res) {
  if (!res.has_trial()) return;
  const v1::Trial& t = res.trial();
  if (t.trial_id() <= 0 || t.experiment_id() <= 0 || t.max_steps() <= 0 || t.attempt() <= 0) {
    Fail("Lease answered a trial without an id, an experiment, a budget or an attempt: " +
         t.ShortDebugString());
  }
  if (t.stop_step() < 0 || t.resume_step() < 0 ||
      (t.stop_step() > 0 && t.stop_step() <= t.resume_step()) || t.resume_step() >= t.max_steps()) {
    Fail("Lease answered a trial with stop_step " + std::to_string(t.stop_step()) +
         " and resume_step " + std::to_string(t.resume_step()) + " of " +
         std::to_string(t.max_steps()) + " steps");
  }
  const auto params = nlohmann::json::parse(t.params_json(), nullptr, false);
  if (!params.is_object())
    Fail("Lease answered params that are not a JSON object: " + t.params_json());
}

// With HPO_FUZZ_WORKER_VERBOSE set, each request (and a lease's trial) is
// printed, to read what an input does.
void Show(const char* what, const google::protobuf::Message& msg) {
  if (Verbose())
    std::fprintf(stderr, "%s %s\n", what, msg.ShortDebugString().substr(0, 300).c_str());
}

// The payload of a record as `msg`; false when it does not parse.
template <typename Message>
bool Parse(const uint8_t* p, size_t n, Message& msg) {
  return msg.ParseFromArray(p, static_cast<int>(n));
}

// Runs one record; false ends the input (a payload that does not parse).
bool RunOne(World& world, std::vector<Worker>& workers, uint8_t op, const uint8_t* p, size_t n) {
  server::WorkerServiceImpl& service = *world.service;
  const int call = (op & 0x0F) % kCallCount;
  ::grpc::ServerContext ctx;
  ::grpc::Status s;
  switch (call) {
    case kRegister: {
      v1::RegisterRequest req;
      v1::RegisterResponse res;
      if (!Parse(p, n, req)) return false;
      s = service.Register(&ctx, &req, &res);
      Check(call, s);
      if (s.ok()) {
        if (res.device_ids_size() != req.devices_size())
          Fail("Register answered a device id per device");
        if (res.session().size() != 64)
          Fail("Register answered a session of " + std::to_string(res.session().size()) +
               " characters");
        workers.push_back({res.worker_id(), res.session()});
      }
      return true;
    }
    case kLease: {
      v1::LeaseRequest req;
      v1::LeaseResponse res;
      if (!Parse(p, n, req)) return false;
      FillIdentity(op, workers, req);
      Show("Lease", req);
      s = service.Lease(&ctx, &req, &res);
      Check(call, s);
      Show("  trial", res.trial());
      if (s.ok()) CheckLease(res);
      return true;
    }
    case kReport: {
      v1::ReportRequest req;
      v1::ReportResponse res;
      if (!Parse(p, n, req)) return false;
      FillIdentity(op, workers, req);
      Show("Report", req);
      s = service.Report(&ctx, &req, &res);
      Check(call, s);
      if (s.ok() && res.decision() == v1::DECISION_UNSPECIFIED) Fail("Report answered no decision");
      return true;
    }
    case kComplete: {
      v1::CompleteRequest req;
      v1::CompleteResponse res;
      if (!Parse(p, n, req)) return false;
      FillIdentity(op, workers, req);
      Show("Complete", req);
      Check(call, service.Complete(&ctx, &req, &res));
      return true;
    }
    case kHeartbeat: {
      v1::HeartbeatRequest req;
      v1::HeartbeatResponse res;
      if (!Parse(p, n, req)) return false;
      FillIdentity(op, workers, req);
      Show("Heartbeat", req);
      s = service.Heartbeat(&ctx, &req, &res);
      Check(call, s);
      for (const int64_t id : res.stop_trial_ids()) {
        bool asked = false;
        for (const int64_t r : req.trial_ids()) asked = asked || r == id;
        if (!asked)
          Fail("Heartbeat told the worker to stop trial " + std::to_string(id) +
               ", which it did not name");
      }
      return true;
    }
    case kPause: {
      v1::PauseRequest req;
      v1::PauseResponse res;
      if (!Parse(p, n, req)) return false;
      FillIdentity(op, workers, req);
      Show("Pause", req);
      Check(call, service.Pause(&ctx, &req, &res));
      return true;
    }
    case kRestart: {
      v1::RestartRequest req;
      v1::RestartResponse res;
      if (!Parse(p, n, req)) return false;
      FillIdentity(op, workers, req);
      Show("Restart", req);
      Check(call, service.Restart(&ctx, &req, &res));
      return true;
    }
    case kUpload: {
      std::vector<v1::CheckpointChunk> chunks;
      const uint8_t* q = p;
      const uint8_t* end = p + n;
      int64_t bytes = 0;
      while (q < end) {
        uint64_t len = 0;
        if (!ReadVarint(q, end, len) || len > static_cast<uint64_t>(end - q)) return false;
        v1::CheckpointChunk chunk;
        if (!Parse(q, len, chunk)) return false;
        q += len;
        // Only the first chunk names the worker and its session.
        if (chunks.empty()) FillIdentity(op, workers, chunk);
        Show("UploadCheckpoint chunk", chunk);
        bytes += static_cast<int64_t>(chunk.data().size());
        chunks.push_back(std::move(chunk));
      }
      ChunkReader reader(std::move(chunks));
      v1::UploadCheckpointResponse res;
      s = service.UploadCheckpointFrom(&ctx, &reader, &res);
      Check(call, s);
      if (s.ok() && res.bytes() != bytes) {
        Fail("UploadCheckpoint stored " + std::to_string(res.bytes()) + " of " +
             std::to_string(bytes) + " bytes");
      }
      return true;
    }
    case kDownload: {
      v1::DownloadCheckpointRequest req;
      if (!Parse(p, n, req)) return false;
      FillIdentity(op, workers, req);
      ChunkWriter writer((op & kStopReading) != 0);
      Show("DownloadCheckpoint", req);
      s = service.DownloadCheckpointTo(&ctx, &req, &writer);
      Check(call, s);
      if (s.ok()) CheckDownload(req, writer.chunks);
      return true;
    }
    case kTimePasses: {
      const uint8_t* q = p;
      uint64_t ms = 0;
      if (!ReadVarint(q, p + n, ms)) return false;
      now_ms += static_cast<int64_t>(std::min<uint64_t>(ms, kMaxTimeStepMs));
      const Status tick = world.engine->Tick();
      if (Verbose())
        std::fprintf(stderr, "  TimePasses %llu -> %s\n", static_cast<unsigned long long>(ms),
                     tick.ToString().c_str());
      if (tick.code() == StatusCode::kInternal) Fail("Tick: " + tick.ToString());
      return true;
    }
  }
  return false;
}

const fs::path& BaseDir() {
  static const fs::path dir = [] {
    // In memory where there is a tmpfs: the artifact store fsyncs every
    // checkpoint, which on a disk costs more than the rest of an input.
    char shm[] = "/dev/shm/hpo-fuzz-worker-XXXXXX";
    char tmp[] = "/tmp/hpo-fuzz-worker-XXXXXX";
    const char* made = mkdtemp(shm);
    if (!made) made = mkdtemp(tmp);
    if (!made) Fail("cannot make a temporary directory");
    fs::path d = made;
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(BaseDir(), ec);
    });
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A payload with a string that is not UTF-8 does not parse, as in the
  // server; protobuf would log each one (most of the output, and slow).
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  if (size == 0) return 0;
  now_ms = kStartMs;
  World world(
      BaseDir() / "world", data[0], [] { return now_ms.load(); },
      [](std::string type, const nlohmann::json& event) {
        // What the server does with each event: count it by its
        // state (server/main.cc) and publish it as JSON text.
        if (type == "trial.finished" && !event.is_object()) Fail(type + " is not a JSON object");
        try {
          (void)event.dump();
        } catch (const std::exception& e) {
          Fail(type + " cannot be written as JSON: " + e.what());
        }
      });
  std::vector<Worker> workers;
  const uint8_t* p = data + 1;
  const uint8_t* end = data + size;
  while (p < end) {
    const uint8_t op = *p++;
    uint64_t len = 0;
    if (!ReadVarint(p, end, len) || len > static_cast<uint64_t>(end - p)) break;
    if (!RunOne(world, workers, op, p, len)) break;
    p += len;
  }
  auto counts = world.store->CountTrials(1);
  if (!counts.ok()) Fail("CountTrials: " + counts.status().ToString());
  auto spec = world.engine->Spec(1);
  if (!spec.ok()) Fail("Spec: " + spec.status().ToString());
  if (counts->total() > (*spec)->max_trials) {
    Fail("the experiment has " + std::to_string(counts->total()) + " trials, over its budget of " +
         std::to_string((*spec)->max_trials));
  }
  return 0;
}
