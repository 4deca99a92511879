// TLS end to end: a self-signed certificate for 127.0.0.1 made with the
// openssl CLI at test time, the real hpo-server with --tls-cert/--tls-key,
// and its real clients: HTTPS for REST (common/http_client, hpctl) and TLS
// for gRPC (hpo-worker).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/http_client.h"
#include "testing/files.h"
#include "testing/server_process.h"

namespace hpo {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

using hpo::testing::ReadFile;

// Runs argv to completion; its exit status, output in `log`.
int RunToEnd(const std::vector<std::string>& argv, const std::string& log, int seconds = 60) {
  const pid_t pid = testing::Spawn(argv, log);
  const std::optional<int> status = testing::WaitExit(pid, std::chrono::seconds(seconds));
  if (!status) {
    testing::KillAndReap(pid);
    return -1;
  }
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : 128;
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/hpo-tls-" + std::to_string(getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    cert_ = dir_ + "/cert.pem";
    key_ = dir_ + "/key.pem";
    // A certificate for the address the tests use; it is its own CA.
    const std::string cmd =
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
        "-addext subjectAltName=IP:127.0.0.1 -keyout " +
        key_ + " -out " + cert_ + " >" + dir_ + "/openssl.log 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << ReadFile(dir_ + "/openssl.log");
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(dir_);
  }

  void StartServer(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        "--store", "sqlite://" + dir_ + "/hpo.db", "--tls-cert", cert_, "--tls-key", key_};
    args.insert(args.end(), extra.begin(), extra.end());
    server_ = std::make_unique<testing::ServerProcess>(HPO_SERVER_BIN, dir_ + "/server", args);
    ASSERT_TRUE(server_->Start().ok()) << server_->Log();
  }
  HttpClientOptions Https() const {
    HttpClientOptions o;
    o.port = server_->http_port();
    o.tls = true;
    o.tls_ca_file = cert_;
    return o;
  }
  // hpo-server's exit code and output for flags that must be refused.
  std::pair<int, std::string> ServerRefuses(const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {
        HPO_SERVER_BIN, "--store",    "sqlite://" + dir_ + "/refused.db", "--http", "127.0.0.1:0",
        "--grpc",       "127.0.0.1:0"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const std::string log = dir_ + "/refused.log";
    const int code = RunToEnd(argv, log, 20);
    return {code, ReadFile(log)};
  }

  std::string dir_, cert_, key_;
  std::unique_ptr<testing::ServerProcess> server_;
};

TEST_F(TlsTest, TheServerRefusesHalfOrUnreadableTlsFlags) {
  auto [code, out] = ServerRefuses({"--tls-cert", cert_});
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("--tls-cert needs --tls-key"), std::string::npos) << out;
  std::tie(code, out) = ServerRefuses({"--tls-key", key_});
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("--tls-key needs --tls-cert"), std::string::npos) << out;
  const std::string missing = dir_ + "/no-such-cert.pem";
  std::tie(code, out) = ServerRefuses({"--tls-cert", missing, "--tls-key", key_});
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("cannot read TLS certificate file '" + missing + "'"), std::string::npos)
      << out;
  // A key that is not a key (the certificate given twice).
  std::tie(code, out) = ServerRefuses({"--tls-cert", cert_, "--tls-key", cert_});
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("TLS key file '" + cert_ + "'"), std::string::npos) << out;
  // No secret material in what it prints.
  EXPECT_EQ(out.find("PRIVATE KEY"), std::string::npos) << out;
}

TEST_F(TlsTest, RestWorksOverHttpsAndPlainHttpIsRefusedCleanly) {
  StartServer({"--token", "t0ken"});
  HttpClientOptions o = Https();
  o.token = "t0ken";
  auto health = HttpRequestOnce(o, "GET", "/healthz");
  ASSERT_TRUE(health.ok()) << health.status() << server_->Log();
  EXPECT_EQ(health->status, 200);
  auto created = HttpRequestOnce(o, "POST", "/api/v1/experiments",
                                 R"({"name": "tls", "objective": {"metric": "loss"},
      "spaces": [{"name": "s", "params": {"x": {"type": "float", "low": 0, "high": 1}}}],
      "executor": {"client": {}}})");
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->status, 201) << created->body;
  auto list = HttpRequestOnce(o, "GET", "/api/v1/experiments");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(json::parse(list->body)["experiments"].size(), 1u);
  // The event stream too (its first event arrives when the experiment is cancelled).
  std::thread cancel([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    (void)HttpRequestOnce(o, "POST", "/api/v1/experiments/1:cancel");
  });
  std::string first_event;
  Status stream =
      ReadEventStream(o, "/api/v1/events", [&](const std::string& type, const std::string&) {
        first_event = type;
        return false;
      });
  cancel.join();
  EXPECT_TRUE(stream.ok()) << stream;
  EXPECT_EQ(first_event, "experiment.finished");

  // Plain HTTP to the HTTPS port: a plain 400 that says what to do.
  HttpClientOptions plain;
  plain.port = server_->http_port();
  auto refused = HttpRequestOnce(plain, "GET", "/api/v1/experiments");
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->status, 400);
  EXPECT_NE(refused->body.find("use https://"), std::string::npos) << refused->body;

  // HTTPS without the CA: the certificate is not trusted, and the error says so.
  HttpClientOptions untrusted = o;
  untrusted.tls_ca_file.clear();
  auto rejected = HttpRequestOnce(untrusted, "GET", "/healthz");
  ASSERT_FALSE(rejected.ok());
  EXPECT_NE(rejected.status().message().find("TLS handshake"), std::string::npos)
      << rejected.status();
  EXPECT_NE(rejected.status().message().find("certificate"), std::string::npos)
      << rejected.status();
  // A CA file that is not there.
  untrusted.tls_ca_file = dir_ + "/nope.pem";
  rejected = HttpRequestOnce(untrusted, "GET", "/healthz");
  ASSERT_FALSE(rejected.ok());
  EXPECT_NE(rejected.status().message().find(dir_ + "/nope.pem"), std::string::npos)
      << rejected.status();
  // The server still serves after all that.
  EXPECT_TRUE(HttpRequestOnce(o, "GET", "/healthz").ok());
}

// TLS 1.2 on both ports offers only ECDHE key exchange with AEAD ciphers:
// what openssl s_client asks for with CBC, SHA-1 MACs or RSA key exchange
// is refused on the REST port as it is on the gRPC port.
TEST_F(TlsTest, OnlyForwardSecretAeadSuitesOnTls12) {
  StartServer();
  // Whether the handshake settled on `cipher` (gRPC closes a connection
  // that speaks no HTTP/2 right after it, so the exit code says nothing).
  auto handshake = [&](uint16_t port, const std::string& cipher) {
    const std::string cmd = "openssl s_client -connect 127.0.0.1:" + std::to_string(port) +
                            " -tls1_2 -cipher " + cipher + " </dev/null >" + dir_ +
                            "/s_client.log 2>&1";
    (void)std::system(cmd.c_str());
    return ReadFile(dir_ + "/s_client.log").find("Cipher is " + cipher) != std::string::npos;
  };
  for (const uint16_t port : {server_->http_port(), server_->grpc_port()}) {
    const std::string where = port == server_->http_port() ? "REST" : "gRPC";
    EXPECT_TRUE(handshake(port, "ECDHE-RSA-AES128-GCM-SHA256"))
        << where << ": " << ReadFile(dir_ + "/s_client.log");
    EXPECT_TRUE(handshake(port, "ECDHE-RSA-AES256-GCM-SHA384"))
        << where << ": " << ReadFile(dir_ + "/s_client.log");
    for (const char* weak :
         {"AES128-SHA", "AES256-GCM-SHA384", "ECDHE-RSA-AES128-SHA", "ECDHE-RSA-AES256-SHA384"}) {
      EXPECT_FALSE(handshake(port, weak)) << where << " accepted " << weak;
    }
  }
}

TEST_F(TlsTest, HpctlTalksHttpsWithTheCa) {
  StartServer();
  const std::string server = "https://127.0.0.1:" + std::to_string(server_->http_port());
  const std::string log = dir_ + "/hpctl.log";
  EXPECT_EQ(RunToEnd({HPCTL_BIN, "--server", server, "--tls-ca", cert_, "list"}, log), 0)
      << ReadFile(log);
  EXPECT_NE(RunToEnd({HPCTL_BIN, "--server", server, "list"}, log), 0);
  EXPECT_NE(ReadFile(log).find("certificate"), std::string::npos) << ReadFile(log);
}

#ifdef HPO_WORKER_BIN
TEST_F(TlsTest, AWorkerWithTheCaCompletesTrialsOverTlsAndOneWithoutItStops) {
  StartServer();
  const std::string script = dir_ + "/train.sh";
  std::ofstream(script)
      << "#!/bin/sh\nfor step in 1 2; do echo \"hpo: step=$step loss=$1\"; done\n";
  fs::permissions(script, fs::perms::owner_all);
  auto created = HttpRequestOnce(Https(), "POST", "/api/v1/experiments",
                                 R"({"name": "tls-worker", "objective": {"metric": "loss"},
      "spaces": [{"name": "s", "params": {"x": {"type": "float", "low": 0, "high": 1}}}],
      "budget": {"max_trials": 2, "max_parallel": 1, "steps_per_trial": 2},
      "executor": {"command": {"argv": [")" +
                                     script + R"(", "{x}"], "timeout_s": 30}}})");
  ASSERT_TRUE(created.ok() && created->status == 201)
      << (created.ok() ? created->body : created.status().ToString());
  const std::string grpc = "127.0.0.1:" + std::to_string(server_->grpc_port());
  const std::vector<std::string> common = {
      HPO_WORKER_BIN, "--benchmark-seconds", "0.1", "--heartbeat-ms", "500", "--device", "cpu"};

  // Without the CA (TLS with the system's CAs): it stops with a clear message.
  std::vector<std::string> argv = common;
  argv.insert(argv.end(), {"--server", "https://" + grpc, "--max-trials", "1"});
  std::string log = dir_ + "/worker-untrusted.log";
  EXPECT_EQ(RunToEnd(argv, log, 60), 1) << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("give the CA that signed it with --tls-ca"), std::string::npos)
      << ReadFile(log);
  // An unreadable CA file: refused before anything else.
  argv = common;
  argv.insert(argv.end(), {"--server", grpc, "--tls-ca", dir_ + "/nope.pem"});
  log = dir_ + "/worker-nofile.log";
  EXPECT_EQ(RunToEnd(argv, log, 20), 1) << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("--tls-ca: cannot read '" + dir_ + "/nope.pem'"), std::string::npos)
      << ReadFile(log);

  // With the CA: both trials complete.
  argv = common;
  argv.insert(argv.end(), {"--server", grpc, "--tls-ca", cert_, "--max-trials", "2"});
  log = dir_ + "/worker.log";
  ASSERT_EQ(RunToEnd(argv, log, 120), 0) << ReadFile(log);
  auto trials = HttpRequestOnce(Https(), "GET", "/api/v1/experiments/1/trials");
  ASSERT_TRUE(trials.ok()) << trials.status();
  const json t = json::parse(trials->body)["trials"];
  ASSERT_EQ(t.size(), 2u) << trials->body;
  for (const auto& trial : t)
    EXPECT_EQ(trial["state"], "completed") << trial.dump() << ReadFile(log);
}
#endif

}  // namespace
}  // namespace hpo
