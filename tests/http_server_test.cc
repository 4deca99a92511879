// The REST port's HTTP, against the real hpo-server.
//  * Clients that hold connections without using them: sockets that send
//    nothing, a header sent a byte a second (slowloris), answers that are
//    never read. None of them may keep another client from being served,
//    each is closed within a bounded time, and SIGTERM still ends the server
//    within its drain bound.
//  * Requests at the edges of the protocol: HEAD, malformed framing, the
//    auth scheme's case.
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>
#include <chrono>
#include <string>

#include "common/http_client.h"
#include "tests/raw_http.h"
#include "testing/server_process.h"

namespace hpo {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::ConnectLoopback;
using testing::PeerClosed;
using testing::SendAll;

constexpr const char* kToken = "connections-test-token";

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::RaiseDescriptorLimit();
    dir_ = ::testing::TempDir() + "/hpo-http-server-" + std::to_string(getpid());
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
    server_ = std::make_unique<testing::ServerProcess>(HPO_SERVER_BIN, dir_, args);
    ASSERT_TRUE(server_->Start().ok()) << server_->Log();
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

TEST_F(HttpServerTest, IdleAndSlowClientsLockNobodyOutAndAreClosed) {
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

TEST_F(HttpServerTest, AtTheConnectionCapTheLongestIdleMakesRoom) {
  StartServer({"--token", kToken, "--http-max-connections", "32"});
  for (int i = 0; i < 100; ++i) ASSERT_GE(Open(), 0);
  std::this_thread::sleep_for(200ms);  // all accepted
  EXPECT_TRUE(Served()) << "a request at the cap, every connection idle, got no answer";
  // The oldest idle ones were closed to make room, not the newest.
  EXPECT_TRUE(PeerClosed(fds_.front()));
}

TEST_F(HttpServerTest, SigtermEndsWithinTheDrainBoundWhileClientsNeverRead) {
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

TEST_F(HttpServerTest, HeadAnswersWithTheHeadersOfGetAndNoBody) {
  StartServer();
  // Two requests on one connection: the second response must follow the
  // first's headers directly, with no body in between.
  const std::string raw = testing::RawRequest(
      server_->http_port(),
      "HEAD /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Connection: close\r\n\r\n");
  ASSERT_EQ(testing::StatusOf(raw), 200) << raw;
  const auto end_of_head = raw.find("\r\n\r\n");
  ASSERT_NE(end_of_head, std::string::npos) << raw;
  EXPECT_NE(raw.substr(0, end_of_head).find("Content-Length: 3"), std::string::npos) << raw;
  EXPECT_EQ(raw.compare(end_of_head + 4, 8, "HTTP/1.1"), 0) << "HEAD's answer carried a body:\n" << raw;
  EXPECT_EQ(raw.substr(raw.size() - 3), "ok\n") << raw;
}

TEST_F(HttpServerTest, MalformedFramingGets400) {
  StartServer();
  const std::vector<std::string> requests = {
      "POST /api/v1/experiments HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: abc\r\n\r\n{}",
      "POST /api/v1/experiments HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
      "POST /api/v1/experiments HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
      "POST /api/v1/experiments HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
      "GET / HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n",
  };
  for (const auto& request : requests) {
    const std::string raw = testing::RawRequest(server_->http_port(), request);
    EXPECT_EQ(testing::StatusOf(raw), 400) << request << "\n->\n" << raw;
    EXPECT_NE(raw.find("malformed HTTP request"), std::string::npos) << raw;
  }
  EXPECT_TRUE(Served()) << "the server stopped answering after malformed requests";
}

// Beast keeps a chunk-size line in the connection's buffer until it ends:
// one without an end, from a client with no token, is cut off with a 400
// once the buffer is full, not kept growing. 64 MiB are offered; the answer
// comes once the server's buffer and the sockets' (a few MiB) are full.
TEST_F(HttpServerTest, AChunkSizeLineWithoutAnEndIsCutOffWith400) {
  StartServer({"--token", kToken});
  const int fd = Open();
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, "POST /api/v1/experiments HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n1;"));
  const std::string filler(64 * 1024, 'a');
  int sent = 0;
  auto answered = [fd] {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  };
  // Until the answer is there to read (before the reset that closing with
  // unread bytes sends could lose it), or a send fails.
  while (sent < 1024 && !answered() && SendAll(fd, filler)) ++sent;
  const std::string raw = testing::ReadUntilClosed(fd, 10s);
  EXPECT_EQ(testing::StatusOf(raw), 400) << raw.substr(0, 300);
  EXPECT_NE(raw.find("chunk-size line or trailer longer than"), std::string::npos) << raw.substr(0, 300);
  EXPECT_LT(sent, 1024) << "the server read 64 MiB of one chunk-size line";
  EXPECT_TRUE(Served()) << "the server stopped answering";
}

TEST_F(HttpServerTest, TheBearerSchemeIsCaseInsensitive) {
  StartServer({"--token", kToken});
  for (const std::string scheme : {"Bearer", "bearer", "BEARER", "bEaReR"}) {
    const std::string raw = testing::RawRequest(
        server_->http_port(), "GET /api/v1/experiments HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: " + scheme +
                                  " " + kToken + "\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(testing::StatusOf(raw), 200) << scheme << ": " << raw;
  }
  const std::string wrong = testing::RawRequest(
      server_->http_port(), "GET /api/v1/experiments HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Basic " +
                                std::string(kToken) + "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(testing::StatusOf(wrong), 401) << wrong;
}

}  // namespace
}  // namespace hpo
