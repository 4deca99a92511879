// The engine's workers (see "Workers" in server/engine/engine.h): their
// registration (the device classes placement groups them by, and the
// session secret each call proves itself with), authentication, liveness
// and heartbeats.
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <charconv>
#include <cmath>

#include "common/token.h"
#include "server/engine/engine_impl.h"

namespace hpo::server {

using nlohmann::json;
using store::Id;

namespace {

bool FiniteNonNegative(double v) { return std::isfinite(v) && v >= 0; }

// Usable cores with one decimal, independent of the process locale.
std::string OneDecimal(double v) {
  char buf[400];  // enough for any finite double in fixed notation
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed, 1);
  if (ec != std::errc()) return "?";
  return std::string(buf, end);
}

// Placement groups devices by class, so the class comes from what the device
// is (kind, model, usable cores), never from where it sits in the list: two
// CPU workers with different core quotas run at different speeds.
std::string ClassOf(const store::DeviceInfo& d) {
  // A GPU model comes in several memory sizes (A100 40 and 80 GB), which
  // train different batch sizes at different speeds: both are the class.
  if (d.kind == store::DeviceKind::kCuda) {
    if (d.memory_bytes <= 0) return "cuda:" + d.name;
    return "cuda:" + d.name + ":" + std::to_string((d.memory_bytes + (int64_t{1} << 29)) >> 30) +
           "GiB";
  }
  return "cpu:" + d.name + ":x" + OneDecimal(d.cores);
}

Status ValidateDevice(const store::DeviceInfo& d, const std::string& path) {
  if (d.name.empty()) return Status::InvalidArgument(path + ".name: must not be empty");
  if (d.name.size() > kMaxNameLength) {
    return Status::InvalidArgument(path + ".name: longer than " + std::to_string(kMaxNameLength) +
                                   " bytes");
  }
  if (d.ordinal < 0) return Status::InvalidArgument(path + ".ordinal: must be >= 0");
  if (!FiniteNonNegative(d.cores))
    return Status::InvalidArgument(path + ".cores: must be a finite number >= 0");
  if (d.memory_bytes < 0) return Status::InvalidArgument(path + ".memory_bytes: must be >= 0");
  if (!FiniteNonNegative(d.benchmark_gflops)) {
    return Status::InvalidArgument(path + ".benchmark_gflops: must be a finite number >= 0");
  }
  return Status::OK();
}

std::string Hex(const unsigned char* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 0xF];
  }
  return out;
}

// A session or identity secret: 32 bytes from the operating system's CSPRNG
// (through OpenSSL), as hex. Unguessable, unlike the sequential worker id
// and the listed (host, instance) they go with.
constexpr size_t kSecretBytes = 32;
Result<std::string> NewSecret() {
  unsigned char bytes[kSecretBytes];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    return Status::Unavailable("cannot draw random bytes for a worker secret; try again");
  }
  return Hex(bytes, sizeof bytes);
}

// What the store keeps of a session or an identity secret: its SHA-256, so
// a copy of the database lets no one act as a worker.
std::string SessionHash(std::string_view session) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(session.data(), session.size(), digest, &size, EVP_sha256(), nullptr) != 1)
    return "";
  return Hex(digest, size);
}
}  // namespace

std::string Engine::WorkerOwner(Id worker_id) { return "worker/" + std::to_string(worker_id); }

Result<RegisteredWorker> EngineImpl::RegisterWorker(const WorkerRegistration& w) {
  if (w.host.empty()) return Status::InvalidArgument("host: must not be empty");
  if (w.host.size() > kMaxNameLength) {
    return Status::InvalidArgument("host: longer than " + std::to_string(kMaxNameLength) +
                                   " bytes");
  }
  if (w.devices.empty()) return Status::InvalidArgument("devices: must list at least one device");
  if (w.devices.size() > kMaxDevicesPerWorker) {
    return Status::InvalidArgument("devices: more than the limit of " +
                                   std::to_string(kMaxDevicesPerWorker));
  }
  if (w.labels.size() > kMaxLabels) {
    return Status::InvalidArgument("labels: more than the limit of " + std::to_string(kMaxLabels));
  }
  if (w.instance.size() > kMaxNameLength) {
    return Status::InvalidArgument("instance: longer than " + std::to_string(kMaxNameLength) +
                                   " bytes");
  }
  if (w.identity_secret.size() > kMaxNameLength) {
    return Status::InvalidArgument("identity_secret: longer than " +
                                   std::to_string(kMaxNameLength) + " bytes");
  }
  store::NewWorker nw;
  nw.host = w.host;
  nw.instance = w.instance;
  json labels = json::object();
  for (const auto& [k, v] : w.labels) {
    if (k.empty() || k.size() > kMaxNameLength || v.size() > kMaxValueLength) {
      return Status::InvalidArgument(
          "labels: a key must be 1 to " + std::to_string(kMaxNameLength) +
          " bytes and a value at most " + std::to_string(kMaxValueLength));
    }
    labels[k] = v;
  }
  nw.labels_json = labels.dump(-1, ' ', false, json::error_handler_t::replace);
  std::map<int, size_t> index_of_ordinal;
  for (size_t i = 0; i < w.devices.size(); ++i) {
    const std::string path = "devices[" + std::to_string(i) + "]";
    store::DeviceInfo d = w.devices[i];
    HPO_RETURN_IF_ERROR(ValidateDevice(d, path));
    if (auto [it, inserted] = index_of_ordinal.emplace(d.ordinal, i); !inserted) {
      return Status::InvalidArgument(path + ".ordinal: " + std::to_string(d.ordinal) +
                                     " is also the ordinal of devices[" +
                                     std::to_string(it->second) + "]");
    }
    d.device_class = ClassOf(d);
    nw.devices.push_back(std::move(d));
  }
  HPO_ASSIGN_OR_RETURN(std::string session, NewSecret());
  nw.session_hash = SessionHash(session);
  if (nw.session_hash.empty())
    return Status::Internal("cannot hash a worker session (SHA-256 unavailable)");
  // An identity the worker can prove on its next start, so that a token
  // holder who read (host, instance) from the worker list cannot register
  // as that worker and take over its id, session and trials. Drawn on every
  // registration with an instance; handed out only when it was stored.
  std::string identity_secret;
  if (!w.instance.empty()) {
    HPO_ASSIGN_OR_RETURN(identity_secret, NewSecret());
    nw.identity_hash = SessionHash(identity_secret);
    if (!w.identity_secret.empty()) nw.presented_identity_hash = SessionHash(w.identity_secret);
    nw.in_use_ms = options_.worker_lease_ms;
  }
  auto registered = store_.RegisterWorker(nw);
  if (registered.status().code() == StatusCode::kAlreadyExists) {
    return Status::AlreadyExists(
        registered.status().message() +
        " (hpo-worker keeps it on the second line of its --id-file). " +
        (w.identity_secret.empty() ? "This registration presented none"
                                   : "The one presented does not match") +
        ": if it is that worker, restarted without its secret, it is registered as a new worker "
        "once the old "
        "registration has been unseen for " +
        std::to_string((options_.worker_lease_ms + 999) / 1000) +
        " s (try again then); if it is another worker, give it another --instance or --id-file");
  }
  HPO_ASSIGN_OR_RETURN(store::WorkerRecord rec, std::move(registered));
  if (rec.identity_hash.empty() || rec.identity_hash != nw.identity_hash) identity_secret.clear();
  WorkerAuth auth;
  auth.session_hash = rec.session_hash;
  for (const auto& d : rec.devices) auth.devices.insert(d.id);
  {
    MutexLock lock(mu_);
    workers_[rec.id] = std::move(auth);
  }
  fleet_->Registered(rec);
  json event = {{"worker_id", rec.id}, {"host", rec.host}, {"instance", rec.instance}};
  if (rec.took_identity_of) event["took_identity_of"] = *rec.took_identity_of;
  Emit("worker.registered", event);
  return RegisteredWorker{std::move(rec), std::move(session), std::move(identity_secret)};
}

Status EngineImpl::TouchWorker(Id worker_id) {
  const int64_t now = NowMs();
  const int64_t interval = std::min<int64_t>(1000, options_.worker_lease_ms / 10);
  {
    MutexLock lock(mu_);
    const auto it = workers_.find(worker_id);
    if (it != workers_.end() && it->second.touched_ms > 0 &&
        now - it->second.touched_ms < interval && now >= it->second.touched_ms) {
      return Status::OK();
    }
  }
  Status s = store_.TouchWorker(worker_id);
  MutexLock lock(mu_);
  if (s.IsNotFound()) {
    workers_.erase(worker_id);
  } else if (const auto it = workers_.find(worker_id); s.ok() && it != workers_.end()) {
    it->second.touched_ms = now;
  }
  return s;
}

std::string_view EngineImpl::WorkerState(const store::WorkerRecord& w) const {
  if (w.gone_ms) return "gone";
  return w.last_seen_ms >= NowMs() - options_.worker_lease_ms ? "live" : "silent";
}

Status EngineImpl::SweepWorkers() {
  // Measured by the store's clock, the one that wrote last_seen_ms.
  HPO_ASSIGN_OR_RETURN(
      auto gone, store_.MarkWorkersGone(options_.worker_gone_after * options_.worker_lease_ms));
  for (const auto& w : gone) {
    if (workers_gone_) workers_gone_->Increment();
    Emit("worker.gone", {{"worker_id", w.id},
                         {"host", w.host},
                         {"instance", w.instance},
                         {"last_seen_ms", w.last_seen_ms}});
  }
  if (options_.worker_retention.count() <= 0) return Status::OK();
  HPO_ASSIGN_OR_RETURN(auto pruned, store_.PruneGoneWorkers(options_.worker_retention.count()));
  if (!pruned.empty()) {
    MutexLock lock(mu_);
    for (Id id : pruned) workers_.erase(id);
  }
  return Status::OK();
}

Result<EngineImpl::WorkerAuth> EngineImpl::Authenticate(const WorkerCaller& caller) {
  std::optional<WorkerAuth> auth;
  {
    MutexLock lock(mu_);
    if (auto it = workers_.find(caller.worker_id); it != workers_.end()) auth = it->second;
  }
  auto reread = [&]() -> Status {
    auto rec = store_.GetWorker(caller.worker_id);
    if (!rec.ok()) {
      // Unknown ones are not kept: the worker may register on another
      // replica. One pruned meanwhile is forgotten here too.
      MutexLock lock(mu_);
      workers_.erase(caller.worker_id);
      return rec.status();
    }
    auth = WorkerAuth();
    auth->session_hash = rec->session_hash;
    for (const auto& d : rec->devices) auth->devices.insert(d.id);
    MutexLock lock(mu_);
    workers_[caller.worker_id] = *auth;
    return Status::OK();
  };
  // Both sides are SHA-256 hex of equal length (a worker registered before
  // sessions has none, and nothing matches it), compared in constant time
  // (TokenEquals, as bearer tokens are) so the time taken says nothing of
  // how much of a guess was right.
  std::optional<std::string> given;
  auto matches = [&] {
    if (caller.session.empty()) return false;
    if (!auth->verified_session.empty() && TokenEquals(caller.session, auth->verified_session))
      return true;
    if (!given) given = SessionHash(caller.session);
    if (!TokenEquals(*given, auth->session_hash)) return false;
    auth->verified_session = caller.session;
    MutexLock lock(mu_);
    if (auto it = workers_.find(caller.worker_id);
        it != workers_.end() && it->second.session_hash == auth->session_hash) {
      it->second.verified_session = caller.session;
    }
    return true;
  };
  bool match = false;
  if (!auth) {
    HPO_RETURN_IF_ERROR(reread());
    match = matches();
  } else if (!(match = matches())) {
    // The kept registration may be older than the worker's session: it
    // registered again (same identity, new session) through another replica.
    HPO_RETURN_IF_ERROR(reread());
    match = matches();
  }
  if (!match) {
    return Status::PermissionDenied(
        "worker " + std::to_string(caller.worker_id) +
        ": the session is missing or is not the one its registration returned "
        "(register again to get one)");
  }
  return *std::move(auth);
}

Status EngineImpl::AuthenticateWorker(const WorkerCaller& caller) {
  return Authenticate(caller).status();
}

Status EngineImpl::CheckDevice(const WorkerCaller& caller, const WorkerAuth& auth, Id device_id) {
  if (auth.devices.count(device_id)) return Status::OK();
  return Status::NotFound("device " + std::to_string(device_id) + " is not a device of worker " +
                          std::to_string(caller.worker_id));
}

Result<std::vector<Id>> EngineImpl::Heartbeat(const WorkerCaller& caller,
                                              const std::vector<Id>& trial_ids) {
  if (trial_ids.size() > kMaxTrialsPerHeartbeat) {
    return Status::InvalidArgument("trial_ids: " + std::to_string(trial_ids.size()) +
                                   " trials in one heartbeat, more than the limit of " +
                                   std::to_string(kMaxTrialsPerHeartbeat) +
                                   " (kMaxTrialsPerHeartbeat)");
  }
  HPO_RETURN_IF_ERROR(Authenticate(caller).status());
  HPO_RETURN_IF_ERROR(TouchWorker(caller.worker_id));
  return store_.RenewLeases(trial_ids, WorkerOwner(caller.worker_id), options_.worker_lease_ms);
}

Result<std::vector<Id>> EngineImpl::LeaveWorker(const WorkerCaller& caller) {
  HPO_RETURN_IF_ERROR(Authenticate(caller).status());
  // Gone in the store first: a fleet reread from here on finds it so.
  HPO_ASSIGN_OR_RETURN(const std::optional<store::WorkerRecord> gone,
                       store_.MarkWorkerGone(caller.worker_id));
  {
    // Its next touch writes (and so counts it live again) rather than
    // being skipped as recent.
    MutexLock lock(mu_);
    if (auto it = workers_.find(caller.worker_id); it != workers_.end()) it->second.touched_ms = 0;
  }
  fleet_->Left(caller.worker_id);
  if (gone) {
    if (workers_gone_) workers_gone_->Increment();
    Emit("worker.gone", {{"worker_id", gone->id},
                         {"host", gone->host},
                         {"instance", gone->instance},
                         {"last_seen_ms", gone->last_seen_ms},
                         {"left", true}});
  }
  // What it still holds (a trial abandoned on a second stop request, a
  // lease whose answer it never got) goes back now, as an expired lease
  // would, rather than after the lease timeout.
  HPO_ASSIGN_OR_RETURN(std::vector<Id> ended,
                       store_.ExpireLeasesNotHeld(WorkerOwner(caller.worker_id), {}));
  if (!ended.empty()) HPO_RETURN_IF_ERROR(Reclaim(ended, "worker left"));
  return ended;
}

}  // namespace hpo::server
