// What the worker-protocol fuzzer (fuzz_worker.cc) and its recorder
// (record_worker.cc) share: the input format, the experiments an input runs
// against, and the server side they both talk to (the WorkerServiceImpl of
// the server hpo-server runs, server/server.h, on an in-memory SQLite store
// with a files artifact store), so that a recorded run replays against what
// it was recorded from.
//
// An input is a sequence of worker calls:
//
//   byte 0       the experiment, kSpecs[byte % kSpecCount], created first
//   then, until the input ends, records of
//     op         1 byte: low 4 bits the call (Call, taken modulo kCallCount),
//                the high ones flags (kAsSent, kWrongSession, kStopReading)
//     length     a varint (protobuf's base-128 encoding)
//     payload    `length` bytes: the call's request message (protobuf wire
//                format); for kUpload a sequence of (varint length, chunk
//                message), the client stream; for kTimePasses a varint of
//                milliseconds
//
// A record whose payload does not parse as its message ends the input. The
// worker id and session of each request are filled in from the workers this
// input registered (unless kAsSent): the request's worker_id picks one of
// them (the last one when it names none), so a recorded run replays
// although every registration draws a new session. Every world starts
// empty, so ids (workers 1, 2, ..., trials 1, 2, ...) are the same from one
// run of an input to the next.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "server/server.h"

namespace hpo::fuzz_worker {

enum Call : uint8_t {
  kRegister = 0,
  kLease = 1,
  kReport = 2,
  kComplete = 3,
  kHeartbeat = 4,
  kPause = 5,
  kRestart = 6,
  kUpload = 7,
  kDownload = 8,
  // Not an RPC: the clock moves on by the payload's milliseconds (at most
  // kMaxTimeStepMs) and the server's housekeeping runs (Engine::Tick), so
  // that leases expire and trials are requeued under the worker's feet.
  kTimePasses = 9,
  kCallCount = 10,
};
// The request's worker_id and session are used as decoded.
inline constexpr uint8_t kAsSent = 0x10;
// The session is another worker's of this input (or, with one worker, its
// own with one character changed): a wrong session.
inline constexpr uint8_t kWrongSession = 0x20;
// kDownload: the worker stops reading after the first chunk.
inline constexpr uint8_t kStopReading = 0x40;

inline constexpr int64_t kMaxTimeStepMs = int64_t{24} * 3600 * 1000;
// A lease lasts this long unless renewed: a minute, the server's default.
inline constexpr int64_t kLeaseMs = 60'000;
// Small, so that the fuzzer reaches the limit; the recorder's checkpoints
// stay far below it.
inline constexpr int64_t kMaxCheckpointBytes = 64 * 1024;

// The experiments (JSON specs): every early-stopping type the worker
// protocol serves (promotion pauses and resumes with checkpoints, stopping
// prunes), co-tuned system parameters (a report may be answered
// CHANGE_SYSTEM), both worker executors, and command placeholders.
inline const char* const kSpecs[] = {
    // 0: promotion-type ASHA over a command program that checkpoints.
    R"({"name": "fuzz-promotion", "objective": {"metric": "loss", "direction": "minimize"},
  "spaces": [{"name": "a", "params": {"x": {"type": "float", "low": -1, "high": 1}}},
             {"name": "b", "params": {"x": {"type": "float", "low": -1, "high": 1},
                                      "k": {"type": "categorical", "choices": ["u", "v"]}}}],
  "system": {"threads": {"type": "int", "low": 1, "high": 4}},
  "algorithm": {"sampler": "random", "seed": 7},
  "early_stopping": {"rule": "asha", "min_resource": 1, "reduction_factor": 2, "type": "promotion"},
  "budget": {"max_trials": 6, "max_parallel": 2, "steps_per_trial": 4},
  "executor": {"command": {"argv": ["sh", "train.sh", "{x}", "{trial_id}", "{steps}", "{threads}", "{k}"],
                           "env": {"FUZZ": "1"}, "timeout_s": 60, "checkpoints": true}}})",
    // 1: stopping-type median over a builtin trainer, TPE, co-tuned threads
    // and batch size.
    R"({"name": "fuzz-stop", "objective": {"metric": "accuracy", "direction": "maximize"},
  "spaces": [{"name": "mlp", "params": {"lr": {"type": "float", "low": 0.0001, "high": 0.1, "log": true}}}],
  "system": {"threads": {"type": "int", "low": 1, "high": 4},
             "batch_size": {"type": "int", "low": 16, "high": 256, "log": true, "affects_accuracy": false}},
  "algorithm": {"sampler": "tpe", "seed": 3},
  "early_stopping": {"rule": "median", "startup_trials": 1, "warmup_steps": 1},
  "budget": {"max_trials": 5, "max_parallel": 2, "steps_per_trial": 3},
  "executor": {"builtin": {"trainer": "fashion-mnist-mlp", "args": {"max_train_samples": 100}}}})",
};
inline constexpr size_t kSpecCount = sizeof(kSpecs) / sizeof(kSpecs[0]);

inline void AppendVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// False at the end of the input or on a varint longer than 10 bytes.
inline bool ReadVarint(const uint8_t*& p, const uint8_t* end, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && p < end; shift += 7) {
    const uint8_t b = *p++;
    v |= uint64_t{b & 0x7Fu} << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

inline void AppendRecord(std::string& out, uint8_t op, const std::string& payload) {
  out.push_back(static_cast<char>(op));
  AppendVarint(out, payload.size());
  out += payload;
}

// The server side of one input (or one recorded run): the server hpo-server
// runs (server/server.h, without its transports) on a fresh in-memory store
// and a files artifact store in `dir` (created; removed by the destructor),
// with the experiment kSpecs[spec] created. `clock` (milliseconds since the
// epoch) is both the store's and the engine's; `on_event` sees every event.
struct World {
  std::filesystem::path dir;
  std::unique_ptr<server::Server> server;
  store::Store* store = nullptr;
  server::Engine* engine = nullptr;
  server::WorkerServiceImpl* service = nullptr;

  World(std::filesystem::path where, size_t spec, std::function<int64_t()> clock,
        std::function<void(std::string, const nlohmann::json&)> on_event,
        int64_t retry_after_ms = 1000)
      : dir(std::move(where)) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    std::filesystem::create_directories(dir);
    spdlog::set_level(
        spdlog::level::warn);  // the server's info lines, once per input, are noise here
    server::ServerOptions o;
    o.listen = false;
    o.store_url = "sqlite://:memory:";
    o.store.clock = clock;
    o.artifacts_location = "files:" + (dir / "checkpoints").string();
    o.artifacts->max_checkpoint_bytes = kMaxCheckpointBytes;
    o.engine.worker_lease_ms = kLeaseMs;
    o.engine.clock = std::move(clock);
    o.engine.on_event = std::move(on_event);
    o.grpc.retry_after_ms = retry_after_ms;
    server = Must(server::Server::Start(std::move(o)), "start the server");
    store = &server->store();
    engine = &server->engine();
    service = &server->worker_service();
    Must(engine->CreateExperiment(kSpecs[spec % kSpecCount]), "create the experiment");
  }
  ~World() {
    server.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  World(const World&) = delete;
  World& operator=(const World&) = delete;

 private:
  // Setting up the world cannot fail on a working machine: abort, saying why.
  template <typename T>
  static T Must(Result<T> r, const char* what) {
    if (!r.ok()) {
      std::fprintf(stderr, "fuzz_worker: cannot %s: %s\n", what, r.status().ToString().c_str());
      std::abort();
    }
    return std::move(r).value();
  }
};

}  // namespace hpo::fuzz_worker
