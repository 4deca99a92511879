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
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/http_client.h"
#include "testing/server_process.h"
#include "tests/raw_http.h"

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
  EXPECT_EQ(refused, 0) << "a normal client was not served beside " << kIdle << " idle and "
                        << kSlow << " slow connections (served " << served << ")";
  EXPECT_GT(served, 10);
  int open_idle = 0, open_slow = 0;
  for (int fd : idle) open_idle += !PeerClosed(fd);
  for (int fd : slow) open_slow += !PeerClosed(fd);
  EXPECT_TRUE(closed) << open_idle << " idle and " << open_slow
                      << " slow connections still open after 30 s";
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
    pipelined += "GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
                 std::string(kToken) + "\r\n\r\n";
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
  const std::string raw =
      testing::RawRequest(server_->http_port(),
                          "HEAD /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /healthz "
                          "HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          "Connection: close\r\n\r\n");
  ASSERT_EQ(testing::StatusOf(raw), 200) << raw;
  const auto end_of_head = raw.find("\r\n\r\n");
  ASSERT_NE(end_of_head, std::string::npos) << raw;
  EXPECT_NE(raw.substr(0, end_of_head).find("Content-Length: 3"), std::string::npos) << raw;
  EXPECT_EQ(raw.compare(end_of_head + 4, 8, "HTTP/1.1"), 0) << "HEAD's answer carried a body:\n"
                                                            << raw;
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
// one without an end, even from a client with the token, is cut off with a 400
// once the buffer is full, not kept growing. 64 MiB are offered; the answer
// comes once the server's buffer and the sockets' (a few MiB) are full.
TEST_F(HttpServerTest, AChunkSizeLineWithoutAnEndIsCutOffWith400) {
  StartServer({"--token", kToken});
  const int fd = Open();
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(
      fd,
      "POST /api/v1/experiments HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Authorization: Bearer " +
          std::string(kToken) + "\r\nTransfer-Encoding: chunked\r\n\r\n1;"));
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
  EXPECT_NE(raw.find("chunk-size line or trailer longer than"), std::string::npos)
      << raw.substr(0, 300);
  EXPECT_LT(sent, 1024) << "the server read 64 MiB of one chunk-size line";
  EXPECT_TRUE(Served()) << "the server stopped answering";
}

TEST_F(HttpServerTest, TheBearerSchemeIsCaseInsensitive) {
  StartServer({"--token", kToken});
  for (const std::string scheme : {"Bearer", "bearer", "BEARER", "bEaReR"}) {
    const std::string raw = testing::RawRequest(
        server_->http_port(),
        "GET /api/v1/experiments HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: " + scheme + " " +
            kToken + "\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(testing::StatusOf(raw), 200) << scheme << ": " << raw;
  }
  const std::string wrong = testing::RawRequest(
      server_->http_port(),
      "GET /api/v1/experiments HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Basic " +
          std::string(kToken) + "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(testing::StatusOf(wrong), 401) << wrong;
}

// The server's resident memory, from /proc, in MiB; -1 when unreadable.
long RssMiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6)) / 1024;
  }
  return -1;
}

std::string Post(const std::string& token, size_t content_length) {
  std::string head =
      "POST /api/v1/experiments HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
  if (!token.empty()) head += "Authorization: Bearer " + token + "\r\n";
  return head + "Content-Length: " + std::to_string(content_length) + "\r\n\r\n";
}

// Whether an answer arrives on fd within `timeout`; its text in *answer.
bool AnswerWithin(int fd, std::chrono::milliseconds timeout, std::string* answer) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
  char buf[4096];
  const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  if (n <= 0) return false;
  answer->assign(buf, static_cast<size_t>(n));
  return true;
}

// A client without the token learns it needs one from the headers alone:
// the server answers before the body it announced, and never reads it.
TEST_F(HttpServerTest, ABodyWithoutTheTokenIsRefusedOnItsHeaders) {
  StartServer({"--token", kToken});
  const int fd = Open();
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, Post("", 8 << 20)));
  std::string answer;
  ASSERT_TRUE(AnswerWithin(fd, 20s, &answer)) << "no answer before the body was sent";
  EXPECT_EQ(testing::StatusOf(answer), 401) << answer;
  // A foreign Origin and a form body are refused the same way.
  for (const std::string extra :
       {"Origin: https://evil.example\r\n", "Content-Type: text/plain\r\n"}) {
    const int other = Open();
    ASSERT_GE(other, 0);
    std::string request = Post(kToken, 8 << 20);
    if (extra.rfind("Content-Type", 0) == 0) {
      request.replace(request.find("Content-Type: application/json\r\n"), 32, extra);
    } else {
      request.insert(request.find("\r\n") + 2, extra);
    }
    ASSERT_TRUE(SendAll(other, request));
    ASSERT_TRUE(AnswerWithin(other, 20s, &answer)) << extra;
    EXPECT_NE(testing::StatusOf(answer), 200) << extra;
    EXPECT_GE(testing::StatusOf(answer), 400) << extra << answer;
  }
}

// Bodies from clients without the token take no memory and hold no
// connection: 40 clients that send 8 MiB each, and a connection cap filled
// with clients that trickle a body, leave the server small and /healthz
// answering.
TEST_F(HttpServerTest, UnauthenticatedBodiesNeitherGrowTheServerNorLockOutProbes) {
  StartServer({"--token", kToken, "--http-max-connections", "64"});
  const long before = RssMiB(server_->pid());
  ASSERT_GT(before, 0);
  // Every body but its last byte, all 40 at once, the connections kept open.
  const std::string body((8 << 20) - 1, 'x');
  std::vector<std::thread> senders;
  std::vector<std::vector<int>> sent(4);
  for (int t = 0; t < 4; ++t) {
    senders.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        const int fd = ConnectLoopback(server_->http_port());
        if (fd < 0) continue;
        sent[t].push_back(fd);
        timeval limit{5, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
        SendAll(fd, Post("", body.size() + 1) + body);  // fails once the server closes: fine
      }
    });
  }
  for (auto& t : senders) t.join();
  const long after = RssMiB(server_->pid());
  for (const auto& fds : sent) {
    for (int fd : fds) ::close(fd);
  }
  EXPECT_LT(after, before + 100) << "resident memory grew from " << before << " to " << after
                                 << " MiB on bodies no one was allowed to send";

  // The cap full of clients that send a body a byte at a time.
  std::vector<int> trickling;
  for (int i = 0; i < 64; ++i) {
    const int fd = Open();
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, Post("", 1 << 20)));
    trickling.push_back(fd);
  }
  std::atomic<bool> done{false};
  std::thread dribble([&] {
    while (!done) {
      for (int fd : trickling) SendAll(fd, "x");
      std::this_thread::sleep_for(200ms);
    }
  });
  // Each was answered on its headers (401; or 503 when it came while the
  // cap was still full of the senders above, closing after their drain),
  // none waits for its body, and each is closed after a short drain,
  // whatever it keeps sending.
  int answered = 0, unauthorized = 0;
  for (int fd : trickling) {
    std::string answer;
    if (!AnswerWithin(fd, 20s, &answer)) continue;
    ++answered;
    unauthorized += testing::StatusOf(answer) == 401;
  }
  EXPECT_EQ(answered, 64);
  EXPECT_GT(unauthorized, 32);
  bool served = false;
  for (int i = 0; i < 100 && !(served = Served()); ++i) std::this_thread::sleep_for(200ms);
  done = true;
  dribble.join();
  EXPECT_TRUE(served)
      << "/healthz and the API stayed locked out by clients trickling bodies without a token";
}

// A token holder's bodies are bounded too: each reserves its
// Content-Length when its headers arrive, and one that does not fit in the
// server's 64 MiB for bodies gets 503 at once instead of memory.
TEST_F(HttpServerTest, AdmittedBodiesBeyondTheServersBudgetGet503) {
  StartServer({"--token", kToken});
  std::vector<int> waiting;
  for (int i = 0; i < 8; ++i) {  // 8 x 8 MiB: the budget, announced and not sent
    const int fd = Open();
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, Post(kToken, 8 << 20)));
    waiting.push_back(fd);
  }
  std::this_thread::sleep_for(500ms);  // their headers are in
  const int fd = Open();
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, Post(kToken, 8 << 20)));
  std::string answer;
  ASSERT_TRUE(AnswerWithin(fd, 20s, &answer)) << "the ninth 8 MiB body was waited for";
  EXPECT_EQ(testing::StatusOf(answer), 503) << answer;
  EXPECT_NE(answer.find("busy receiving"), std::string::npos) << answer;
  EXPECT_TRUE(Served()) << "probes and small reads still go through";
  // Once the waiting ones are gone, a body fits again.
  for (int w : waiting) ::close(w);
  bool fits = false;
  for (int i = 0; i < 50 && !fits; ++i) {
    HttpClientOptions o;
    o.port = server_->http_port();
    o.token = kToken;
    auto r = HttpRequestOnce(o, "POST", "/api/v1/experiments:validate", R"({"name": "x"})");
    fits = r.ok() && r->status != 503;
    if (!fits) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(fits) << "the reservations of closed connections were not given back";
}

// Large dashboard files are read from disk as a client takes them: clients
// that ask for one and never read hold no memory, and lock out no one.
TEST_F(HttpServerTest, DownloadsThatAreNeverReadLockNobodyOut) {
  const std::string web = dir_ + "/web";
  fs::create_directories(web);
  std::ofstream(web + "/index.html")
      << "<html><script type=\"module\" src=\"/big.js\"></script></html>";
  std::ofstream(web + "/big.js") << std::string(8 << 20, '/');
  StartServer({"--token", kToken, "--web-root", web});
  const long before = RssMiB(server_->pid());
  for (int i = 0; i < 40; ++i) {  // 320 MiB of answers, more than the 256 MiB send budget
    const int fd = ConnectLoopback(server_->http_port());
    ASSERT_GE(fd, 0);
    const int small = 4096;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    fds_.push_back(fd);
    ASSERT_TRUE(SendAll(fd, "GET /big.js HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  }
  std::this_thread::sleep_for(1s);
  EXPECT_TRUE(Served()) << "clients that never read their download locked out /healthz or the API";
  EXPECT_LT(RssMiB(server_->pid()), before + 100) << "downloads were held in memory";
}
}  // namespace
}  // namespace hpo
