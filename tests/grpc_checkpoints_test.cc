// Checkpoints through the real gRPC service on 127.0.0.1:0 (a SQLite store
// and a files artifact store): a trial pauses at its stop_step on one
// worker, its checkpoint travels in chunks, and another worker resumes it;
// a corrupt or missing checkpoint restarts the trial from step 1 with the
// reason; bad uploads are refused naming what is wrong; a worker process
// killed mid-upload leaves the previous checkpoint valid.
//
// Trials are set up leased with a stop_step (Store::CreateTrialsUpTo with
// NewTrial.lease_owner) and resumed with Store::ResumeTrial, as the lease
// path does.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/sha256.h"
#include "server/engine/engine.h"
#include "server/grpc/worker_service.h"
#include "testing/files.h"
#include "testing/server_process.h"
#include "testing/store_backends.h"
#include "testing/world.h"

namespace hpo::server {
namespace {

namespace fs = std::filesystem;
namespace v1 = hpo::v1;
using nlohmann::json;
using store::TrialState;

constexpr const char* kToken = "ckpt-token";

const char* kSpec = R"({"name": "ckpt", "objective": {"metric": "loss", "direction": "minimize"},
  "spaces": [{"name": "a", "params": {"x": {"type": "float", "low": -1, "high": 1}}}],
  "algorithm": {"sampler": "random", "seed": 3},
  "budget": {"max_trials": 20, "max_parallel": 1, "steps_per_trial": 5},
  "executor": {"command": {"argv": ["train", "{x}"]}}})";

std::string Bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

class GrpcCheckpointsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WorldOptions wo;
    wo.store_url = db_.url();
    wo.artifacts.emplace().max_checkpoint_bytes = int64_t{8} << 20;
    wo.engine.on_event = [this](std::string type, const json& data) {
      std::lock_guard lock(mu_);
      events_.emplace_back(std::move(type), data);
    };
    auto world = testing::World::Create(std::move(wo));
    ASSERT_TRUE(world.ok()) << world.status();
    world_ = std::move(world).value();
    store_ = &world_->store();
    artifacts_ = world_->artifacts();
    engine_ = &world_->engine();
    checkpoint_dir_ = (*artifacts_).description().substr(6);
    service_ = std::make_unique<WorkerServiceImpl>(*engine_, WorkerServiceOptions{kToken, 10});
    auto server = GrpcServer::Start("127.0.0.1:0", service_.get());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    stub_ = v1::WorkerService::NewStub(
        ::grpc::CreateChannel(Address(), ::grpc::InsecureChannelCredentials()));
    auto e = engine_->CreateExperiment(kSpec);
    ASSERT_TRUE(e.ok()) << e.status();
    experiment_ = e->id;
    a_ = Register("a");
    b_ = Register("b");
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::seconds(1));
  }

  std::string Address() const { return "127.0.0.1:" + std::to_string(server_->port()); }
  static std::unique_ptr<::grpc::ClientContext> Ctx() {
    auto ctx = std::make_unique<::grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ctx->AddMetadata("authorization", std::string("Bearer ") + kToken);
    return ctx;
  }

  struct Worker {
    int64_t id = 0;
    std::string session;
    std::string owner;
  };
  Worker Register(const std::string& host) {
    v1::RegisterRequest req;
    req.set_host(host);
    auto* d = req.add_devices();
    d->set_kind(v1::DEVICE_KIND_CPU);
    d->set_name("cpu");
    d->set_cores(1);
    v1::RegisterResponse res;
    ::grpc::Status s = stub_->Register(Ctx().get(), req, &res);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return {res.worker_id(), res.session(), Engine::WorkerOwner(res.worker_id())};
  }

  int64_t LeasedTrial(const Worker& w, int64_t stop_step) {
    store::NewTrial t;
    t.params_json = R"({"x": 0.25})";
    t.space_id = store_->GetExperiment(experiment_)->spaces.at(0).id;
    t.lease_owner = w.owner;
    t.lease_ms = 60'000;
    t.stop_step = stop_step;
    auto r = store_->CreateTrials(experiment_, {t});
    EXPECT_TRUE(r.ok()) << r.status();
    return r->at(0).id;
  }

  ::grpc::Status Report(const Worker& w, int64_t trial, int64_t step, v1::ReportResponse* res) {
    v1::ReportRequest req;
    req.set_worker_id(w.id);
    req.set_session(w.session);
    req.set_trial_id(trial);
    req.set_step(step);
    (*req.mutable_metrics())["loss"] = 1.0 / step;
    return stub_->Report(Ctx().get(), req, res);
  }
  v1::Decision ReportOk(const Worker& w, int64_t trial, int64_t step) {
    v1::ReportResponse res;
    ::grpc::Status s = Report(w, trial, step, &res);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return res.decision();
  }

  // Uploads `data` as `w` in chunks of `chunk` bytes; `edit` may change
  // each chunk before it goes (index, chunk).
  ::grpc::Status Upload(const Worker& w, int64_t trial, int64_t step, const std::string& data,
                        size_t chunk = size_t{1} << 20,
                        std::function<void(int, v1::CheckpointChunk&)> edit = nullptr) {
    auto ctx = Ctx();
    v1::UploadCheckpointResponse res;
    auto writer = stub_->UploadCheckpoint(ctx.get(), &res);
    int index = 0;
    for (size_t off = 0; off < data.size() || index == 0; off += chunk, ++index) {
      v1::CheckpointChunk c;
      if (index == 0) {
        c.set_worker_id(w.id);
        c.set_session(w.session);
        c.set_trial_id(trial);
        c.set_step(step);
        c.set_total_bytes(static_cast<int64_t>(data.size()));
      }
      c.set_data(data.substr(off, chunk));
      if (off + chunk >= data.size()) c.set_sha256(Sha256Hex(data));
      if (edit) edit(index, c);
      if (!writer->Write(c)) break;
    }
    writer->WritesDone();
    ::grpc::Status s = writer->Finish();
    if (s.ok()) {
      EXPECT_EQ(res.bytes(), static_cast<int64_t>(data.size()));
    }
    return s;
  }

  struct Downloaded {
    ::grpc::Status status;
    std::string data;
    std::vector<v1::CheckpointChunk> chunks;  // without their data
  };
  Downloaded Download(const Worker& w, int64_t trial) {
    auto ctx = Ctx();
    v1::DownloadCheckpointRequest req;
    req.set_worker_id(w.id);
    req.set_session(w.session);
    req.set_trial_id(trial);
    auto reader = stub_->DownloadCheckpoint(ctx.get(), req);
    Downloaded out;
    v1::CheckpointChunk c;
    while (reader->Read(&c)) {
      EXPECT_LE(c.data().size(), kCheckpointChunkBytes);
      out.data += c.data();
      c.clear_data();
      out.chunks.push_back(c);
    }
    out.status = reader->Finish();
    return out;
  }

  ::grpc::Status Pause(const Worker& w, int64_t trial, int64_t step, bool uploaded) {
    v1::PauseRequest req;
    req.set_worker_id(w.id);
    req.set_session(w.session);
    req.set_trial_id(trial);
    req.set_step(step);
    req.set_checkpoint_uploaded(uploaded);
    v1::PauseResponse res;
    return stub_->Pause(Ctx().get(), req, &res);
  }
  ::grpc::Status Restart(const Worker& w, int64_t trial, const std::string& reason) {
    v1::RestartRequest req;
    req.set_worker_id(w.id);
    req.set_session(w.session);
    req.set_trial_id(trial);
    req.set_reason(reason);
    v1::RestartResponse res;
    return stub_->Restart(Ctx().get(), req, &res);
  }

  // A trial paused on worker a after step 2 with `state` as its
  // checkpoint, then promoted to worker b.
  int64_t PausedAndPromotedToB(const std::string& state) {
    const int64_t trial = LeasedTrial(a_, 2);
    EXPECT_EQ(ReportOk(a_, trial, 1), v1::DECISION_CONTINUE);
    EXPECT_EQ(ReportOk(a_, trial, 2), v1::DECISION_PAUSE);
    ::grpc::Status up = Upload(a_, trial, 2, state);
    EXPECT_TRUE(up.ok()) << up.error_message();
    ::grpc::Status p = Pause(a_, trial, 2, true);
    EXPECT_TRUE(p.ok()) << p.error_message();
    EXPECT_TRUE(store_->ResumeTrial(trial, b_.owner, 60'000, std::nullopt).ok());
    return trial;
  }

  std::string File(int64_t trial) const {
    return checkpoint_dir_ + "/trial-" + std::to_string(trial) + ".ckpt";
  }
  std::vector<json> Events(const std::string& type) {
    std::lock_guard lock(mu_);
    std::vector<json> out;
    for (const auto& [t, d] : events_) {
      if (t == type) out.push_back(d);
    }
    return out;
  }
  // Restarted from scratch: the worker reports from step 1 again.
  void ExpectRestartedFromScratch(int64_t trial, const std::string& reason) {
    const auto restarted = Events("trial.restarted");
    ASSERT_EQ(restarted.size(), 1u);
    EXPECT_EQ(restarted[0]["trial_id"], trial);
    EXPECT_EQ(restarted[0]["reason"], reason);
    EXPECT_EQ(restarted[0]["by"], "worker");
    const auto t = *store_->GetTrial(trial);
    EXPECT_EQ(t.resume_step, 0);
    EXPECT_TRUE(store_->ListMeasurements(trial)->empty()) << "the steps of before are gone";
    for (int step = 1; step <= 5; ++step)
      EXPECT_EQ(ReportOk(b_, trial, step), v1::DECISION_CONTINUE);
    EXPECT_EQ(store_->ListMeasurements(trial)->size(), 5u);
  }

  testing::SqliteBackend db_;
  std::unique_ptr<testing::World> world_;
  store::Store* store_ = nullptr;
  store::ArtifactStore* artifacts_ = nullptr;
  std::string checkpoint_dir_;
  Engine* engine_ = nullptr;
  std::unique_ptr<WorkerServiceImpl> service_;
  std::unique_ptr<GrpcServer> server_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  int64_t experiment_ = 0;
  Worker a_, b_;
  std::mutex mu_;
  std::vector<std::pair<std::string, json>> events_;  // GUARDED_BY(mu_)
};

TEST_F(GrpcCheckpointsTest, APausedTrialResumesOnAnotherWorkerFromItsCheckpoint) {
  const std::string state = Bytes((5u << 20) / 2, 1);  // three chunks
  const int64_t trial = PausedAndPromotedToB(state);
  const auto paused = Events("trial.paused");
  ASSERT_EQ(paused.size(), 1u);
  EXPECT_EQ(paused[0]["checkpoint"], true);
  EXPECT_EQ(paused[0]["step"], 2);

  const Downloaded got = Download(b_, trial);
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_TRUE(got.data == state) << got.data.size() << " bytes of " << state.size();
  ASSERT_EQ(got.chunks.size(), 4u) << "three with data, the last with the checksum";
  EXPECT_EQ(got.chunks.front().trial_id(), trial);
  EXPECT_EQ(got.chunks.front().step(), 2);
  EXPECT_EQ(got.chunks.front().total_bytes(), static_cast<int64_t>(state.size()));
  EXPECT_EQ(got.chunks.back().sha256(), Sha256Hex(state));
  for (size_t i = 0; i + 1 < got.chunks.size(); ++i) EXPECT_TRUE(got.chunks[i].sha256().empty());

  // Worker a holds it no longer.
  const Downloaded from_a = Download(a_, trial);
  EXPECT_EQ(from_a.status.error_code(), ::grpc::StatusCode::FAILED_PRECONDITION);
  // Worker b goes on at step 3, to the end.
  for (int step = 3; step <= 5; ++step) EXPECT_EQ(ReportOk(b_, trial, step), v1::DECISION_CONTINUE);
  v1::CompleteRequest done;
  done.set_worker_id(b_.id);
  done.set_session(b_.session);
  done.set_trial_id(trial);
  (*done.mutable_final_metrics())["loss"] = 0.2;
  v1::CompleteResponse res;
  ASSERT_TRUE(stub_->Complete(Ctx().get(), done, &res).ok());
  EXPECT_EQ(store_->GetTrial(trial)->state, TrialState::kCompleted);
  EXPECT_FALSE(fs::exists(File(trial))) << "deleted when the trial ended";
}

TEST_F(GrpcCheckpointsTest, ACorruptCheckpointRestartsTheTrialFromStepOneWithTheReason) {
  const int64_t trial = PausedAndPromotedToB(Bytes(300'000, 2));
  {
    std::fstream f(File(trial), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(256 + 1000);  // in the data, past the header
    f.write("\x00\x01\x02", 3);
  }
  const Downloaded got = Download(b_, trial);
  EXPECT_EQ(got.status.error_code(), ::grpc::StatusCode::DATA_LOSS) << got.status.error_message();
  EXPECT_NE(got.status.error_message().find("corrupt"), std::string::npos)
      << got.status.error_message();
  ASSERT_FALSE(got.chunks.empty());
  EXPECT_TRUE(got.chunks.back().sha256().empty())
      << "no checksum vouches for bytes that did not match";
  // What the worker does with that: restart, and say why.
  const std::string why = "the checkpoint could not be restored: " + got.status.error_message();
  ASSERT_TRUE(Restart(b_, trial, why).ok());
  ExpectRestartedFromScratch(trial, why);
  EXPECT_FALSE(fs::exists(File(trial))) << "the bad checkpoint is gone";
}

TEST_F(GrpcCheckpointsTest, AMissingCheckpointRestartsTheTrialFromStepOne) {
  const int64_t trial = PausedAndPromotedToB(Bytes(1000, 3));
  fs::remove(File(trial));
  const Downloaded got = Download(b_, trial);
  EXPECT_EQ(got.status.error_code(), ::grpc::StatusCode::NOT_FOUND) << got.status.error_message();
  EXPECT_NE(got.status.error_message().find("has no checkpoint"), std::string::npos)
      << got.status.error_message();
  ASSERT_TRUE(Restart(b_, trial, "missing").ok());
  ExpectRestartedFromScratch(trial, "missing");
}

TEST_F(GrpcCheckpointsTest, BadUploadsAreRefusedNamingWhatIsWrongAndStoreNothing) {
  const int64_t trial = LeasedTrial(a_, 2);
  ReportOk(a_, trial, 1);
  ReportOk(a_, trial, 2);
  const std::string data = Bytes(2'500'000, 4);
  struct Case {
    std::string name;
    std::function<::grpc::Status()> upload;
    ::grpc::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"not this worker's trial", [&] { return Upload(b_, trial, 2, data); },
       ::grpc::StatusCode::FAILED_PRECONDITION,
       "cannot upload a checkpoint of trial " + std::to_string(trial) + ": it is not leased to '" +
           b_.owner + "'"},
      {"over the limit", [&] { return Upload(a_, trial, 2, Bytes((8u << 20) + 1, 5)); },
       ::grpc::StatusCode::RESOURCE_EXHAUSTED,
       "over the server's limit of 8 MiB (--max-checkpoint-mb)"},
      {"wrong checksum",
       [&] {
         return Upload(a_, trial, 2, data, 1 << 20, [](int, v1::CheckpointChunk& c) {
           if (!c.sha256().empty()) c.set_sha256(std::string(64, 'a'));
         });
       },
       ::grpc::StatusCode::DATA_LOSS, "SHA-256"},
      {"no checksum",
       [&] {
         return Upload(a_, trial, 2, data, 1 << 20,
                       [](int, v1::CheckpointChunk& c) { c.clear_sha256(); });
       },
       ::grpc::StatusCode::DATA_LOSS, "ended without the sha256"},
      {"shorter than announced",
       [&] {
         return Upload(a_, trial, 2, data, 1 << 20, [&](int i, v1::CheckpointChunk& c) {
           if (i == 0) c.set_total_bytes(static_cast<int64_t>(data.size()) + 1);
         });
       },
       ::grpc::StatusCode::DATA_LOSS, "is short"},
      {"longer than announced",
       [&] {
         return Upload(a_, trial, 2, data, 1 << 20, [&](int i, v1::CheckpointChunk& c) {
           if (i == 0) c.set_total_bytes(10);
         });
       },
       ::grpc::StatusCode::DATA_LOSS, "more than the 10 bytes announced"},
      {"a chunk over 1 MiB", [&] { return Upload(a_, trial, 2, data, (1 << 20) + 1); },
       ::grpc::StatusCode::INVALID_ARGUMENT,
       "chunks[0].data: 1048577 bytes, over the limit of 1048576"},
      {"a checkpoint older than the step it resumed after",
       [&] { return Upload(a_, trial, -1, data); }, ::grpc::StatusCode::INVALID_ARGUMENT, "step"},
      {"a checkpoint past the trial's last step",
       [&] { return Upload(a_, trial, 4611686018427387904, data); },
       ::grpc::StatusCode::INVALID_ARGUMENT,
       "step: 4611686018427387904 is past the trial's last step, 5 (budget.steps_per_trial)"},
  };
  for (const auto& c : cases) {
    ::grpc::Status s = c.upload();
    EXPECT_EQ(s.error_code(), c.code) << c.name << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(c.message), std::string::npos)
        << c.name << ": want \"" << c.message << "\" in \"" << s.error_message() << "\"";
  }
  EXPECT_FALSE(artifacts_->Stat(trial)->has_value());
  EXPECT_TRUE(artifacts_->List()->empty()) << "no upload left behind";
  // A pause that claims a checkpoint it does not have is one without.
  ASSERT_TRUE(Pause(a_, trial, 2, true).ok());
  EXPECT_EQ(Events("trial.paused").at(0)["checkpoint"], false);
}

TEST_F(GrpcCheckpointsTest, PauseAndDownloadRefuseWhatDoesNotApply) {
  const int64_t trial = LeasedTrial(a_, 3);
  ReportOk(a_, trial, 1);
  ReportOk(a_, trial, 2);
  ::grpc::Status early = Pause(a_, trial, 3, false);
  EXPECT_EQ(early.error_code(), ::grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(early.error_message().find("last reported step is 2"), std::string::npos)
      << early.error_message();
  ::grpc::Status other = Pause(b_, trial, 2, false);
  EXPECT_EQ(other.error_code(), ::grpc::StatusCode::FAILED_PRECONDITION) << other.error_message();
  // A trial that did not resume has nothing to download.
  const Downloaded nothing = Download(a_, trial);
  EXPECT_EQ(nothing.status.error_code(), ::grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(nothing.status.error_message().find("starts from scratch"), std::string::npos)
      << nothing.status.error_message();
  // A wrong session is refused on every one of them.
  Worker impostor = a_;
  impostor.session = std::string(64, '0');
  EXPECT_EQ(Pause(impostor, trial, 2, false).error_code(), ::grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Restart(impostor, trial, "x").error_code(), ::grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Upload(impostor, trial, 2, "x").error_code(), ::grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Download(impostor, trial).status.error_code(), ::grpc::StatusCode::PERMISSION_DENIED);
}

// kill -9 of a worker process mid-upload: the server abandons the upload and
// the trial keeps its previous checkpoint, whole.
TEST_F(GrpcCheckpointsTest, AWorkerKilledMidUploadLeavesThePreviousCheckpointValid) {
  const int64_t trial = LeasedTrial(a_, 4);
  for (int step = 1; step <= 2; ++step) ReportOk(a_, trial, step);
  const std::string previous = Bytes(700'000, 6);
  ASSERT_TRUE(Upload(a_, trial, 2, previous).ok());

  const std::string log = checkpoint_dir_ + "/../child.log";
  const pid_t child =
      testing::Spawn({CHECKPOINT_UPLOAD_CHILD, Address(), kToken, std::to_string(a_.id), a_.session,
                      std::to_string(trial), "2", std::to_string(6 << 20), "3"},
                     log);
  ASSERT_GT(child, 0);
  // Until the server holds part of the new checkpoint.
  auto upload_in_progress = [&] {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(checkpoint_dir_, ec)) {
      if (e.path().filename().string().find(".upload-") != std::string::npos &&
          fs::file_size(e.path(), ec) >= (3u << 20)) {
        return true;
      }
    }
    return false;
  };
  for (int i = 0; i < 600 && !upload_in_progress(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(upload_in_progress())
      << "the child's upload never reached the server: " << testing::ReadFile(log);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));

  // The server notices the broken stream and drops what it had.
  for (int i = 0; i < 600 && upload_in_progress(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(upload_in_progress()) << "the abandoned upload was not cleaned up";
  auto info = artifacts_->Stat(trial);
  ASSERT_TRUE(info.ok() && info->has_value()) << info.status();
  EXPECT_EQ((*info)->step, 2);
  EXPECT_EQ((*info)->sha256, Sha256Hex(previous));
  auto reader = artifacts_->Open(trial);
  ASSERT_TRUE(reader.ok());
  std::string back;
  for (;;) {
    auto piece = (*reader)->Read(1 << 20);
    ASSERT_TRUE(piece.ok()) << piece.status();
    if (piece->empty()) break;
    back += *piece;
  }
  EXPECT_TRUE(back == previous);
  // The worker, started again, pauses with a new one.
  for (int step = 3; step <= 4; ++step) ReportOk(a_, trial, step);
  ASSERT_TRUE(Upload(a_, trial, 4, Bytes(100, 7)).ok());
  ASSERT_TRUE(Pause(a_, trial, 4, true).ok());
  EXPECT_EQ(Events("trial.paused").at(0)["checkpoint"], true);
}

// kill -9 of a worker after its upload of a rung's checkpoint went through
// but before its Pause: its lease runs out, and the trial must still resume
// from a checkpoint that fits it, not start over.
TEST_F(GrpcCheckpointsTest, AWorkerKilledBetweenItsUploadAndItsPauseLeavesAUsableCheckpoint) {
  const std::string first = Bytes(300'000, 8);
  const int64_t trial = PausedAndPromotedToB(first);
  // PausedAndPromotedToB resumed it with no rung to stop at; this one is at step 4.
  db_.Raw("UPDATE trials SET stop_step = 4 WHERE id = " + std::to_string(trial));
  ASSERT_TRUE(Download(b_, trial).status.ok());
  EXPECT_EQ(ReportOk(b_, trial, 3), v1::DECISION_CONTINUE);
  EXPECT_EQ(ReportOk(b_, trial, 4), v1::DECISION_PAUSE);
  const std::string second = Bytes(300'000, 9);
  ASSERT_TRUE(Upload(b_, trial, 4, second).ok());
  // Worker b dies here, before its Pause; its lease runs out.
  db_.Raw("UPDATE trials SET lease_expires_ms = 1 WHERE id = " + std::to_string(trial) +
          " AND state IN ('leased', 'running')");
  ASSERT_TRUE(store_->ReclaimExpiredLeases(3).ok());

  const store::TrialRecord t = *store_->GetTrial(trial);
  ASSERT_EQ(t.state, TrialState::kPaused);
  ASSERT_TRUE(store_->ResumeTrial(trial, a_.owner, 60'000, std::nullopt).ok());
  const Downloaded got = Download(a_, trial);
  ASSERT_TRUE(got.status.ok()) << "paused after step " << t.resume_step << ": "
                               << got.status.error_message();
  EXPECT_EQ(got.chunks.front().step(), t.resume_step);
  EXPECT_TRUE(got.data == (t.resume_step == 4 ? second : first));
  EXPECT_EQ(store_->ListMeasurements(trial)->size(), static_cast<size_t>(t.resume_step))
      << "the history matches the checkpoint";
  EXPECT_TRUE(Events("trial.restarted").empty());
  // Worker b's Pause, had it come, is acknowledged as a retry.
}

// An upload stream that sends its first chunk (1 MiB of `total` bytes) and
// then nothing, with no deadline of its own: a stalled or hostile worker.
// Its call is waited on in the background; destroying it cancels the call.
class StalledUpload {
 public:
  StalledUpload(v1::WorkerService::Stub& stub, int64_t worker, const std::string& session,
                int64_t trial, int64_t step, int64_t total, bool send_first_chunk = true) {
    ctx_.AddMetadata("authorization", std::string("Bearer ") + kToken);
    writer_ = stub.UploadCheckpoint(&ctx_, &res_);
    if (send_first_chunk) {
      v1::CheckpointChunk c;
      c.set_worker_id(worker);
      c.set_session(session);
      c.set_trial_id(trial);
      c.set_step(step);
      c.set_total_bytes(total);
      c.set_data(Bytes(size_t{1} << 20, 11));
      writer_->Write(c);
    }
    finished_ = std::async(std::launch::async, [this] { return writer_->Finish(); });
  }
  ~StalledUpload() {
    ctx_.TryCancel();
    if (finished_.valid()) finished_.wait();
  }
  // How the call ended, once the server ended it; nullopt when it did not
  // within a minute (the client never will).
  std::optional<::grpc::Status> EndedByServer() {
    if (!ended_ && finished_.wait_for(std::chrono::seconds(60)) == std::future_status::ready) {
      ended_ = finished_.get();
    }
    return ended_;
  }

 private:
  ::grpc::ClientContext ctx_;
  v1::UploadCheckpointResponse res_;
  std::unique_ptr<::grpc::ClientWriter<v1::CheckpointChunk>> writer_;
  std::future<::grpc::Status> finished_;
  std::optional<::grpc::Status> ended_;
};

// Uploads the server holds partly written now (files:DIR's temporary files).
size_t UploadsOnDisk(const std::string& dir) {
  size_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().find(".upload-") != std::string::npos) ++n;
  }
  return n;
}

// Polls (every 50 ms, up to a minute) until `done` holds.
bool Eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 1200; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

// Many uploads to one trial, each stalled after its first chunk: each new
// one ends the one before, so one at a time holds a temporary file and a
// server thread; a complete upload then ends the last and is the one kept.
// (Failed before: every stalled stream was kept, with its file and thread,
// for as long as its client kept it open.)
TEST_F(GrpcCheckpointsTest, ANewerUploadOfATrialEndsTheOlderOneSoOneIsInFlight) {
  const int64_t trial = LeasedTrial(a_, 4);
  for (int step = 1; step <= 2; ++step) ReportOk(a_, trial, step);
  std::vector<std::unique_ptr<StalledUpload>> stalled;
  for (int i = 0; i < 8; ++i) {
    stalled.push_back(
        std::make_unique<StalledUpload>(*stub_, a_.id, a_.session, trial, 2, int64_t{4} << 20));
    if (i == 0) {
      // Until the server holds its first chunk.
      ASSERT_TRUE(Eventually([&] { return UploadsOnDisk(checkpoint_dir_) == 1; }));
      continue;
    }
    // Ended by this one's first chunk (so the next starts after this one).
    auto ended = stalled[i - 1]->EndedByServer();
    ASSERT_TRUE(ended.has_value())
        << "upload " << i - 1 << " is still in flight beside upload " << i;
    EXPECT_FALSE(ended->ok());
  }
  EXPECT_TRUE(Eventually([&] { return UploadsOnDisk(checkpoint_dir_) == 1; }))
      << UploadsOnDisk(checkpoint_dir_) << " uploads on disk";

  const std::string state = Bytes(300'000, 12);
  ASSERT_TRUE(Upload(a_, trial, 2, state).ok());
  auto last = stalled.back()->EndedByServer();
  ASSERT_TRUE(last.has_value()) << "the last stalled upload is still in flight";
  EXPECT_FALSE(last->ok());
  EXPECT_TRUE(Eventually([&] { return UploadsOnDisk(checkpoint_dir_) == 0; }));
  auto info = artifacts_->Stat(trial);
  ASSERT_TRUE(info.ok() && info->has_value()) << info.status();
  EXPECT_EQ((*info)->sha256, Sha256Hex(state));
}

// A stalled upload ends when its worker's lease of the trial does, its
// partial file removed and the previous checkpoint kept. (Failed before:
// it outlived the lease for as long as its client kept the stream open.)
TEST_F(GrpcCheckpointsTest, AStalledUploadEndsWithItsLeaseAndLeavesThePreviousCheckpoint) {
  const int64_t trial = LeasedTrial(a_, 4);
  for (int step = 1; step <= 2; ++step) ReportOk(a_, trial, step);
  const std::string previous = Bytes(200'000, 13);
  ASSERT_TRUE(Upload(a_, trial, 2, previous).ok());

  StalledUpload stalled(*stub_, a_.id, a_.session, trial, 2, int64_t{6} << 20);
  ASSERT_TRUE(Eventually([&] { return UploadsOnDisk(checkpoint_dir_) == 1; }));
  // Worker a stops heartbeating: its lease runs out and is reclaimed.
  db_.Raw("UPDATE trials SET lease_expires_ms = 1 WHERE id = " + std::to_string(trial));
  ASSERT_TRUE(store_->ReclaimExpiredLeases(3).ok());
  ASSERT_EQ(store_->GetTrial(trial)->state, TrialState::kPending);

  auto ended = stalled.EndedByServer();
  ASSERT_TRUE(ended.has_value()) << "the upload outlived its lease";
  EXPECT_FALSE(ended->ok());
  EXPECT_TRUE(Eventually([&] { return UploadsOnDisk(checkpoint_dir_) == 0; }))
      << "its partial file is left";
  auto info = artifacts_->Stat(trial);
  ASSERT_TRUE(info.ok() && info->has_value()) << info.status();
  EXPECT_EQ((*info)->step, 2);
  EXPECT_EQ((*info)->sha256, Sha256Hex(previous));
}

// The server's own deadline ends an upload whose worker holds its lease but
// sends nothing more, and a stream that never sends its first chunk. Run on
// a second service over the same engine with a deadline of a second.
TEST_F(GrpcCheckpointsTest, AnUploadPastTheServersDeadlineEnds) {
  WorkerServiceOptions options;
  options.token = kToken;
  options.upload_deadline_base = std::chrono::seconds(1);
  options.upload_min_bytes_per_sec = int64_t{1} << 40;
  options.upload_check_interval = std::chrono::milliseconds(50);
  WorkerServiceImpl service(*engine_, options);
  auto server = GrpcServer::Start("127.0.0.1:0", &service);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::WorkerService::NewStub(::grpc::CreateChannel(
      "127.0.0.1:" + std::to_string((*server)->port()), ::grpc::InsecureChannelCredentials()));

  const int64_t trial = LeasedTrial(a_, 4);
  for (int step = 1; step <= 2; ++step) ReportOk(a_, trial, step);
  {
    StalledUpload stalled(*stub, a_.id, a_.session, trial, 2, int64_t{6} << 20);
    auto ended = stalled.EndedByServer();
    ASSERT_TRUE(ended.has_value()) << "the upload outlived the server's deadline";
    EXPECT_FALSE(ended->ok());
    EXPECT_TRUE(Eventually([&] { return UploadsOnDisk(checkpoint_dir_) == 0; }))
        << "its partial file is left";
  }
  {
    StalledUpload silent(*stub, 0, "", 0, 0, 0, /*send_first_chunk=*/false);
    auto ended = silent.EndedByServer();
    ASSERT_TRUE(ended.has_value())
        << "a stream without a first chunk outlived the server's deadline";
    EXPECT_FALSE(ended->ok());
  }
  EXPECT_EQ(store_->GetTrial(trial)->state, TrialState::kRunning) << "the lease is untouched";
  EXPECT_FALSE(artifacts_->Stat(trial)->has_value()) << "nothing was stored";
  (*server)->Shutdown(std::chrono::seconds(1));
}

}  // namespace
}  // namespace hpo::server
