// The REST port under clients that hold connections without using them,
// against the real hpo-server: sockets that send nothing, a header sent a
// byte a second (slowloris), answers that are never read. None of them may
// keep another client from being served, each is closed within a bounded
// time, and SIGTERM still ends the server within its drain bound.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "common/http_client.h"
#include "tests/raw_http.h"
#include "tests/server_process.h"

namespace hpo {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::ConnectLoopback;
using testing::PeerClosed;
using testing::SendAll;

constexpr const char* kToken = "connections-test-token";

class HttpConnectionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::RaiseDescriptorLimit();
    dir_ = ::testing::TempDir() + "/hpo-http-connections-" + std::to_string(getpid());
    fs::remove_all(dir_);
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
    server_.reset();
    fs::remove_all(dir_);
  }
  void StartServer(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--store", "sqlite://" + dir_ + "/hpo.db"};
    args.insert(args.end(), extra.begin(), extra.end());
    server_ = std::make_unique<testing::ServerProcess>(dir_, args);
    ASSERT_TRUE(server_->Start()) << server_->Log();
  }
  int Open() {
    const int fd = ConnectLoopback(server_->http_port());
    if (fd >= 0) fds_.push_back(fd);
    return fd;
  }
  // A normal client's two calls: the probe and an authenticated API read.
  bool Served() {
    HttpClientOptions o;
    o.port = server_->http_port();
    o.token = kToken;
    o.timeout = 5s;
    auto health = HttpRequestOnce(o, "GET", "/healthz");
    auto list = HttpRequestOnce(o, "GET", "/api/v1/experiments");
    return health.ok() && health->status == 200 && list.ok() && list->status == 200;
  }

  std::string dir_;
  std::unique_ptr<testing::ServerProcess> server_;
  std::vector<int> fds_;
};

TEST_F(HttpConnectionsTest, IdleAndSlowClientsLockNobodyOutAndAreClosed) {
  StartServer({"--token", kToken});
  constexpr int kIdle = 600, kSlow = 50;
  std::vector<int> idle, slow;
  for (int i = 0; i < kIdle; ++i) {
    const int fd = Open();
    ASSERT_GE(fd, 0) << "connection " << i;
    idle.push_back(fd);
  }
  for (int i = 0; i < kSlow; ++i) {
    const int fd = Open();
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "));
    slow.push_back(fd);
  }
  // A byte a second on each slow connection, a normal client all along.
  std::atomic<bool> done{false};
  std::thread dribble([&] {
    while (!done) {
      for (int fd : slow) SendAll(fd, "a");
      std::this_thread::sleep_for(1s);
    }
  });
  int served = 0, refused = 0;
  const auto start = std::chrono::steady_clock::now();
  // The header deadline is 10 s; every one of them must be gone within 30 s.
  auto all_closed = [&] {
    for (const auto* group : {&idle, &slow}) {
      for (int fd : *group) {
        if (!PeerClosed(fd)) return false;
      }
    }
    return true;
  };
  bool closed = false;
  while (std::chrono::steady_clock::now() - start < 30s) {
    (Served() ? served : refused)++;
    if (std::chrono::steady_clock::now() - start > 10s && (closed = all_closed())) break;
    std::this_thread::sleep_for(200ms);
  }
  done = true;
  dribble.join();
  EXPECT_EQ(refused, 0) << "a normal client was not served beside " << kIdle << " idle and " << kSlow
                        << " slow connections (served " << served << ")";
  EXPECT_GT(served, 10);
  int open_idle = 0, open_slow = 0;
  for (int fd : idle) open_idle += !PeerClosed(fd);
  for (int fd : slow) open_slow += !PeerClosed(fd);
  EXPECT_TRUE(closed) << open_idle << " idle and " << open_slow << " slow connections still open after 30 s";
}

TEST_F(HttpConnectionsTest, AtTheConnectionCapTheLongestIdleMakesRoom) {
  StartServer({"--token", kToken, "--http-max-connections", "32"});
  for (int i = 0; i < 100; ++i) ASSERT_GE(Open(), 0);
  std::this_thread::sleep_for(200ms);  // all accepted
  EXPECT_TRUE(Served()) << "a request at the cap, every connection idle, got no answer";
  // The oldest idle ones were closed to make room, not the newest.
  EXPECT_TRUE(PeerClosed(fds_.front()));
}

TEST_F(HttpConnectionsTest, SigtermEndsWithinTheDrainBoundWhileClientsNeverRead) {
  StartServer({"--token", kToken});
  // Clients that ask and never read: hundreds of pipelined requests each,
  // far more answer than the socket buffers hold.
  std::string pipelined;
  for (int i = 0; i < 400; ++i) {
    pipelined += "GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + std::string(kToken) +
                 "\r\n\r\n";
  }
  for (int i = 0; i < 20; ++i) {
    const int fd = Open();
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, pipelined));
  }
  for (int i = 0; i < 100; ++i) ASSERT_GE(Open(), 0);  // and some that say nothing
  std::this_thread::sleep_for(1s);
  EXPECT_TRUE(Served());
  // The drain bound is 5 s; well within 20 s the process is gone.
  const int status = server_->StopWithin(SIGTERM, 20s);
  ASSERT_NE(status, -1) << "hpo-server did not exit within 20 s of SIGTERM";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
}

}  // namespace
}  // namespace hpo
