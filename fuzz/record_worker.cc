// Records the worker-protocol fuzzer's seeds (fuzz/corpus/worker/) from
// real runs: the real hpo-worker client loop (worker/client.cc, with the
// command executor running a shell program that keeps the checkpoint
// contract) against the real WorkerServiceImpl on a gRPC port, with the
// world fuzz_worker.cc replays them against (fuzz/worker_world.h). A
// forwarding service in front of the real one writes each request as it
// arrives, in the fuzzer's input format; calls are served one at a time, so
// the recorded order is the order the engine saw them in.
//
//   fuzz_worker_record OUT_DIR
//
// writes OUT_DIR/recorded-<scenario> per scenario, cut after the last whole
// call within kMaxSeedBytes (bench/fuzz runs with -max_len=4096), and the
// whole run as OUT_DIR/recorded-<scenario>-full when it is longer. Sessions
// are left out (the fuzzer fills in each registration's own), and an empty
// lease the same worker just asked for is written once: it changes nothing
// but the worker's last-seen time.
//
// The builtin-trainer experiment (kSpecs[1]) runs the same client loop with a
// small stand-in for LibTorch's trainer (reports steps, follows system
// changes), since this build has no LibTorch; what crosses the protocol is
// the client's own.
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "fuzz/worker_world.h"
#include "worker/client.h"
#include "worker/command_executor.h"

namespace {

using namespace hpo;
using namespace hpo::fuzz_worker;
namespace fs = std::filesystem;
namespace v1 = hpo::v1;

constexpr size_t kMaxSeedBytes = 4096;

// Records every request, then runs the real handler, one call at a time.
class RecordingService final : public v1::WorkerService::Service {
 public:
  explicit RecordingService(server::WorkerServiceImpl& impl) : impl_(impl) {}

  // The recorded calls as a fuzz input for experiment `spec`, and the byte
  // offset after each call.
  std::string input(uint8_t spec, std::vector<size_t>* ends) const {
    std::lock_guard lock(mu_);
    std::string out(1, static_cast<char>(spec));
    for (const std::string& r : records_) {
      out += r;
      if (ends) ends->push_back(out.size());
    }
    return out;
  }

  ::grpc::Status Register(::grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                          v1::RegisterResponse* res) override {
    std::lock_guard lock(mu_);
    Record(kRegister, 0, *req, false);
    return impl_.Register(ctx, req, res);
  }
  ::grpc::Status Lease(::grpc::ServerContext* ctx, const v1::LeaseRequest* req,
                       v1::LeaseResponse* res) override {
    std::lock_guard lock(mu_);
    ::grpc::Status s = impl_.Lease(ctx, req, res);
    Record(kLease, req->worker_id(), WithoutSession(*req), s.ok() && !res->has_trial());
    return s;
  }
  ::grpc::Status Report(::grpc::ServerContext* ctx, const v1::ReportRequest* req,
                        v1::ReportResponse* res) override {
    std::lock_guard lock(mu_);
    Record(kReport, req->worker_id(), WithoutSession(*req), false);
    return impl_.Report(ctx, req, res);
  }
  ::grpc::Status Complete(::grpc::ServerContext* ctx, const v1::CompleteRequest* req,
                          v1::CompleteResponse* res) override {
    std::lock_guard lock(mu_);
    Record(kComplete, req->worker_id(), WithoutSession(*req), false);
    return impl_.Complete(ctx, req, res);
  }
  ::grpc::Status Heartbeat(::grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                           v1::HeartbeatResponse* res) override {
    std::lock_guard lock(mu_);
    Record(kHeartbeat, req->worker_id(), WithoutSession(*req), false);
    return impl_.Heartbeat(ctx, req, res);
  }
  ::grpc::Status Pause(::grpc::ServerContext* ctx, const v1::PauseRequest* req,
                       v1::PauseResponse* res) override {
    std::lock_guard lock(mu_);
    Record(kPause, req->worker_id(), WithoutSession(*req), false);
    return impl_.Pause(ctx, req, res);
  }
  ::grpc::Status Restart(::grpc::ServerContext* ctx, const v1::RestartRequest* req,
                         v1::RestartResponse* res) override {
    std::lock_guard lock(mu_);
    Record(kRestart, req->worker_id(), WithoutSession(*req), false);
    return impl_.Restart(ctx, req, res);
  }
  ::grpc::Status DownloadCheckpoint(::grpc::ServerContext* ctx,
                                    const v1::DownloadCheckpointRequest* req,
                                    ::grpc::ServerWriter<v1::CheckpointChunk>* writer) override {
    std::lock_guard lock(mu_);
    Record(kDownload, req->worker_id(), WithoutSession(*req), false);
    return impl_.DownloadCheckpointTo(ctx, req, writer);
  }
  // The chunks are recorded as the handler reads them, and written as one
  // call once it is done.
  ::grpc::Status UploadCheckpoint(::grpc::ServerContext* ctx,
                                  ::grpc::ServerReader<v1::CheckpointChunk>* reader,
                                  v1::UploadCheckpointResponse* res) override {
    std::lock_guard lock(mu_);
    Tee tee(*reader);
    ::grpc::Status s = impl_.UploadCheckpointFrom(ctx, &tee, res);
    records_.emplace_back();
    AppendRecord(records_.back(), kUpload, tee.payload);
    last_of_worker_[tee.worker_id] = {records_.size() - 1, false};
    return s;
  }

 private:
  class Tee final : public ::grpc::ServerReaderInterface<v1::CheckpointChunk> {
   public:
    explicit Tee(::grpc::ServerReader<v1::CheckpointChunk>& in) : in_(in) {}
    void SendInitialMetadata() override { in_.SendInitialMetadata(); }
    bool NextMessageSize(uint32_t* size) override { return in_.NextMessageSize(size); }
    bool Read(v1::CheckpointChunk* msg) override {
      if (!in_.Read(msg)) return false;
      v1::CheckpointChunk copy = WithoutSession(*msg);
      if (worker_id == 0) worker_id = copy.worker_id();
      const std::string bytes = copy.SerializeAsString();
      AppendVarint(payload, bytes.size());
      payload += bytes;
      return true;
    }
    std::string payload;
    int64_t worker_id = 0;

   private:
    ::grpc::ServerReader<v1::CheckpointChunk>& in_;
  };

  template <typename Request>
  static Request WithoutSession(const Request& req) {
    Request copy = req;
    copy.clear_session();
    return copy;
  }

  // REQUIRES: mu_ held.
  template <typename Request>
  void Record(uint8_t op, int64_t worker_id, const Request& req, bool empty_lease) {
    std::string record;
    AppendRecord(record, op, req.SerializeAsString());
    auto last = last_of_worker_.find(worker_id);
    if (empty_lease && last != last_of_worker_.end() && last->second.empty_lease &&
        records_[last->second.index] == record) {
      return;
    }
    records_.push_back(std::move(record));
    last_of_worker_[worker_id] = {records_.size() - 1, empty_lease};
  }

  server::WorkerServiceImpl& impl_;
  mutable std::mutex mu_;
  std::vector<std::string> records_;  // GUARDED_BY(mu_)
  struct Last {
    size_t index = 0;
    bool empty_lease = false;
  };
  std::map<int64_t, Last> last_of_worker_;  // GUARDED_BY(mu_)
};

// What LibTorch's builtin trainer does over the protocol: one report per
// epoch with accuracy and speed, the system setting it ran with, switching
// when told to.
class StandInTrainer final : public worker::Executor {
 public:
  Result<worker::RunResult> Run(const worker::TrialRun& run, worker::Reporter& reporter) override {
    nlohmann::json system = run.system;
    const double lr = run.params.value("lr", 0.01);
    worker::RunResult result;
    for (int64_t step = 1; step <= run.max_steps; ++step) {
      std::map<std::string, double> metrics{{"accuracy", 0.5 + 0.1 * step * lr * 10},
                                            {"loss", 1.0 / step}};
      const double speed = 1000.0 * system.value("threads", 1);
      switch (reporter.Report(step, metrics, speed, system)) {
        case worker::Verdict::kStop:
          result.stopped = true;
          return result;
        case worker::Verdict::kChangeSystem:
          system = reporter.new_system();
          break;
        case worker::Verdict::kPause:
          result.paused = true;
          result.checkpoint_error = "the stand-in trainer keeps no checkpoints";
          return result;
        case worker::Verdict::kContinue:
          break;
      }
      result.final_metrics = metrics;
    }
    result.log_tail = "stand-in trainer done";
    return result;
  }
};

// The trial program of kSpecs[0]: argv is x, trial_id, steps, threads, k.
// Keeps the checkpoint contract of worker/command_executor.h. `refuse`:
// it refuses every checkpoint it is given (the worker calls Restart);
// `fail`: trials with an even id fail at step 2 (a failed Complete), and
// step 3 takes long enough for the worker's heartbeats to go out.
std::string TrainScript(bool refuse, bool fail) {
  std::string s = "#!/bin/sh\nx=$1\nstart=1\n";
  s += "if [ -n \"$HPO_RESUME_STEP\" ]; then\n";
  s +=
      refuse
          ? "  echo 'refusing the checkpoint' >&2; exit 65\n"
          : "  [ -f \"$HPO_CHECKPOINT_DIR/state\" ] || exit 65\n  start=$((HPO_RESUME_STEP + 1))\n";
  s += "fi\nstep=$start\n";
  s += "while [ $step -le $HPO_MAX_STEPS ]; do\n";
  if (fail) {
    s += "  if [ $step = 2 ] && [ $(($2 % 2)) = 0 ]; then echo 'diverged' >&2; exit 3; fi\n";
    s += "  if [ $step = 3 ]; then sleep 0.5; fi\n";
  }
  s += "  loss=$(awk -v x=\"$x\" -v s=$step 'BEGIN { printf \"%.4f\", x * x + 1 / s }')\n";
  s += "  if [ \"$step\" = \"$HPO_STOP_STEP\" ]; then echo $step > \"$HPO_CHECKPOINT_DIR/state\"; "
       "fi\n";
  s += "  echo \"hpo: step=$step loss=$loss samples_per_sec=100\"\n";
  s += "  if [ \"$step\" = \"$HPO_STOP_STEP\" ]; then exit 0; fi\n";
  s += "  step=$((step + 1))\n";
  s += "done\n";
  return s;
}

struct Scenario {
  std::string name;
  uint8_t spec = 0;
  int workers = 1;
  int devices_per_worker = 1;
  bool refuse = false;
  bool fail = false;
};

bool RecordScenario(const Scenario& sc, const fs::path& out_dir) {
  const fs::path dir =
      fs::temp_directory_path() / ("hpo-fuzz-worker-record-" + std::to_string(getpid()));
  World world(dir / "world", sc.spec, {}, {}, /*retry_after_ms=*/100);
  fs::create_directories(dir / "work");
  std::ofstream(dir / "work" / "train.sh") << TrainScript(sc.refuse, sc.fail);
  RecordingService recording(*world.service);
  auto server = server::GrpcServer::Start("127.0.0.1:0", &recording);
  if (!server.ok()) {
    std::fprintf(stderr, "%s: cannot start the gRPC server: %s\n", sc.name.c_str(),
                 server.status().ToString().c_str());
    return false;
  }
  std::atomic<int> stop{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < sc.workers; ++w) {
    worker::WorkerOptions o;
    o.server = "127.0.0.1:" + std::to_string((*server)->port());
    o.host = "worker-" + std::to_string(w);
    o.labels = {{"pool", w == 0 ? "cpu" : "spare"}};
    for (int d = 0; d < sc.devices_per_worker; ++d) {
      worker::DeviceSpec dev;
      dev.device = "cpu";
      dev.name = "Recorded CPU";
      dev.cores = 2;
      dev.memory_bytes = int64_t{4} << 30;
      dev.benchmark_gflops = 10 + w;
      o.devices.push_back(dev);
    }
    o.heartbeat_ms = 200;
    o.scratch_dir = (dir / "scratch").string();
    fs::create_directories(o.scratch_dir);
    worker::CommandExecutor::Options co;
    co.working_dir = (dir / "work").string();
    co.scratch_dir = o.scratch_dir;
    worker::Executors ex;
    ex.command = std::make_unique<worker::CommandExecutor>(co);
    ex.builtin = std::make_unique<StandInTrainer>();
    workers.emplace_back(
        [o, executors = std::make_shared<worker::Executors>(std::move(ex)), &stop] {
          worker::WorkerClient client(o, std::move(*executors));
          Status s = client.Run(stop);
          if (!s.ok())
            std::fprintf(stderr, "worker %s: %s\n", o.host.c_str(), s.ToString().c_str());
        });
  }
  // Until the experiment ends (or a minute passes: what was recorded is
  // still a seed).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool ended = false;
  while (!ended && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto e = world.store->GetExperiment(1);
    ended = e.ok() && e->state != store::ExperimentState::kRunning;
  }
  stop = 1;
  for (auto& t : workers) t.join();
  (*server)->Shutdown(std::chrono::seconds(1));
  auto counts = world.store->CountTrials(1);

  std::vector<size_t> ends;
  const std::string input = recording.input(sc.spec, &ends);
  size_t cut = 1;
  for (size_t e : ends) {
    if (e <= kMaxSeedBytes) cut = e;
  }
  std::ofstream(out_dir / ("recorded-" + sc.name), std::ios::binary) << input.substr(0, cut);
  if (cut < input.size())
    std::ofstream(out_dir / ("recorded-" + sc.name + "-full"), std::ios::binary) << input;
  std::printf(
      "%s: %zu calls, %zu bytes (seed %zu), experiment %s, trials %lld (completed %lld, pruned "
      "%lld, "
      "failed %lld)\n",
      sc.name.c_str(), ends.size(), input.size(), cut, ended ? "ended" : "still running after 60 s",
      static_cast<long long>(counts.ok() ? counts->total() : -1),
      static_cast<long long>(counts.ok() ? counts->completed : -1),
      static_cast<long long>(counts.ok() ? counts->pruned : -1),
      static_cast<long long>(counts.ok() ? counts->failed : -1));
  std::error_code ec;
  fs::remove_all(dir, ec);
  return ended;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  const fs::path out = argv[1];
  fs::create_directories(out);
  const Scenario scenarios[] = {
      {"promotion-one-worker", 0, 1, 1, false, false},
      {"promotion-two-workers", 0, 2, 1, false, false},
      {"restart-and-fail", 0, 1, 1, true, true},
      {"builtin-two-devices", 1, 1, 2, false, false},
  };
  bool ok = true;
  for (const Scenario& sc : scenarios) ok = RecordScenario(sc, out) && ok;
  return ok ? 0 : 1;
}
