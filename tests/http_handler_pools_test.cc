// HttpServer's two handler pools: GET and HEAD run on the read pool, at a
// lower CPU priority (read_nice), and a write is answered while every read
// thread is busy. The server is the real one, in this process, with a
// handler that records where each request ran.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/http_client.h"
#include "common/mutex.h"
#include "server/http/api.h"
#include "server/http/http_server.h"

namespace hpo::server {
namespace {

using namespace std::chrono_literals;

int ThisThreadsNice() { return getpriority(PRIO_PROCESS, static_cast<id_t>(gettid())); }

class HttpHandlerPoolsTest : public ::testing::Test {
 protected:
  void Start(HttpServerOptions options) {
    options.port = 0;
    auto server = HttpServer::Start(options, [this](const HttpRequest& r) { return Handle(r); });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    client_.port = server_->port();
    client_.timeout = 10s;
  }
  void TearDown() override {
    Release();
    if (server_) server_->Shutdown();
  }

  // "/block" waits until Release(); every request answers with the nice
  // value of the thread that ran it.
  HttpResponse Handle(const HttpRequest& r) {
    if (r.path == "/block") {
      MutexLock lock(mu_);
      ++blocked_;
      cv_.NotifyAll();
      while (!released_) cv_.Wait(mu_);
    }
    HttpResponse res;
    res.body = std::to_string(ThisThreadsNice());
    return res;
  }
  void Release() {
    MutexLock lock(mu_);
    released_ = true;
    cv_.NotifyAll();
  }
  bool WaitBlocked(int n, std::chrono::milliseconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    MutexLock lock(mu_);
    while (blocked_ < n) {
      if (!cv_.WaitUntil(mu_, deadline)) return blocked_ >= n;
    }
    return true;
  }
  int Blocked() {
    MutexLock lock(mu_);
    return blocked_;
  }
  // The nice value a request's handler ran at.
  int NiceOf(const std::string& method) {
    auto r = HttpRequestOnce(client_, method, "/nice", method == "POST" ? "{}" : "");
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return -100;
    EXPECT_EQ(r->status, 200);
    return std::stoi(r->body);
  }

  std::unique_ptr<HttpServer> server_;
  HttpClientOptions client_;
  Mutex mu_;
  CondVar cv_;
  int blocked_ HPO_GUARDED_BY(mu_) = 0;
  bool released_ HPO_GUARDED_BY(mu_) = false;
};

TEST_F(HttpHandlerPoolsTest, ReadsRunAtTheLowerPriorityAndWritesAtTheProcesss) {
  const int base = ThisThreadsNice();
  if (base > 14)
    GTEST_SKIP() << "this test runs at nice " << base << ": no room to lower reads by 5";
  HttpServerOptions o;
  o.read_nice = 5;
  o.read_handler_threads = 1;  // so that the second GET runs on the thread of the first
  Start(o);
  EXPECT_EQ(NiceOf("GET"), base + 5);
  EXPECT_EQ(NiceOf("GET"), base + 5) << "lowered once per thread, not once per request";
  EXPECT_EQ(NiceOf("POST"), base);
  EXPECT_EQ(NiceOf("PUT"), base);
}

TEST_F(HttpHandlerPoolsTest, ReadsAtTheSamePriorityWhenReadNiceIsZero) {
  const int base = ThisThreadsNice();
  Start(HttpServerOptions{});
  EXPECT_EQ(NiceOf("GET"), base);
  EXPECT_EQ(NiceOf("POST"), base);
}

TEST_F(HttpHandlerPoolsTest, AWriteIsAnsweredWhileEveryReadThreadIsBusy) {
  HttpServerOptions o;
  o.read_handler_threads = 2;
  o.handler_threads = 2;
  Start(o);
  std::vector<std::future<Result<HttpResult>>> reads;
  for (int i = 0; i < 3; ++i) {
    reads.push_back(std::async(std::launch::async,
                               [this] { return HttpRequestOnce(client_, "GET", "/block"); }));
  }
  ASSERT_TRUE(WaitBlocked(2, 10s)) << "two reads should be running";
  // The third read waits for a read thread; a write does not.
  auto write = HttpRequestOnce(client_, "POST", "/nice", "{}");
  ASSERT_TRUE(write.ok()) << write.status();
  EXPECT_EQ(write->status, 200);
  EXPECT_EQ(Blocked(), 2) << "the read pool has two threads: the third read must wait";
  Release();
  for (auto& r : reads) {
    auto got = r.get();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->status, 200);
  }
  EXPECT_EQ(Blocked(), 3);
}

TEST_F(HttpHandlerPoolsTest, WhatTheCallerCallsNoReadSkipsTheReadPool) {
  const int base = ThisThreadsNice();
  if (base > 14)
    GTEST_SKIP() << "this test runs at nice " << base << ": no room to lower reads by 5";
  HttpServerOptions o;
  o.read_nice = 5;
  o.read_handler_threads = 1;
  o.is_read = [](const HttpRequest& r) { return r.method == "GET" && r.path != "/probe"; };
  Start(o);
  auto blocked =
      std::async(std::launch::async, [this] { return HttpRequestOnce(client_, "GET", "/block"); });
  ASSERT_TRUE(WaitBlocked(1, 10s)) << "the one read thread should be busy";
  auto probe = HttpRequestOnce(client_, "GET", "/probe");
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_EQ(probe->body, std::to_string(base))
      << "answered beside the busy read, at the server's priority";
  Release();
  auto got = blocked.get();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->body, std::to_string(base + 5));
}

TEST(RestApiReads, ProbesAndWritesAreNotBackgroundReads) {
  const auto request = [](std::string method, std::string path) {
    HttpRequest r;
    r.method = std::move(method);
    r.path = std::move(path);
    return r;
  };
  EXPECT_TRUE(RestApi::IsBackgroundRead(request("GET", "/api/v1/experiments")));
  EXPECT_TRUE(RestApi::IsBackgroundRead(request("HEAD", "/api/v1/workers")));
  EXPECT_TRUE(RestApi::IsBackgroundRead(request("GET", "/")));
  EXPECT_FALSE(RestApi::IsBackgroundRead(request("GET", "/healthz")));
  EXPECT_FALSE(RestApi::IsBackgroundRead(request("GET", "/readyz")));
  EXPECT_TRUE(RestApi::IsBackgroundRead(request("GET", "/metrics")));
  EXPECT_FALSE(RestApi::IsBackgroundRead(request("POST", "/api/v1/experiments/1/trials:suggest")));
  EXPECT_FALSE(RestApi::IsBackgroundRead(request("DELETE", "/api/v1/experiments/1")));
}

TEST_F(HttpHandlerPoolsTest, ANiceOutsideZeroToNineteenIsRefusedByName) {
  for (int bad : {-1, 20}) {
    HttpServerOptions o;
    o.port = 0;
    o.read_nice = bad;
    auto server = HttpServer::Start(o, [](const HttpRequest&) { return HttpResponse{}; });
    ASSERT_FALSE(server.ok());
    EXPECT_NE(server.status().message().find("read_nice"), std::string::npos) << server.status();
  }
}

// A connection from `source` (a loopback address) to 127.0.0.1:port that
// sends `request` and takes at most 4 KiB at a time into its receive
// buffer; the descriptor, or -1.
int SendFrom(const char* source, uint16_t port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  const int small = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source, &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0 ||
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The status of a GET from `source`, read whole (a small answer).
int StatusFrom(const char* source, uint16_t port, const std::string& path) {
  const int fd = SendFrom(
      source, port, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  if (fd < 0) return -1;
  timeval limit{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  char buf[64] = {};
  const ssize_t n = ::recv(fd, buf, sizeof buf - 1, 0);
  ::close(fd);
  int status = -1;
  if (n > 12) std::sscanf(buf, "HTTP/1.1 %d", &status);
  return status;
}

// Answers that are never read spend the send budget: the peer that holds
// them is refused further answers (503) past its share, other peers are
// served until the whole budget is spent, and probes are answered always.
TEST(HttpServerBudgets, APeerThatNeverReadsSpendsOnlyItsShareAndProbesAreAlwaysAnswered) {
  HttpServerOptions o;
  o.port = 0;
  o.max_pending_response_bytes = 20 << 20;
  o.max_pending_response_bytes_per_peer = 4 << 20;
  o.is_probe = [](const HttpRequest& r) { return r.path == "/healthz"; };
  auto started = HttpServer::Start(o, [](const HttpRequest& r) {
    HttpResponse res;
    res.content_type = "text/plain";
    res.body = r.path == "/big" ? std::string(8 << 20, 'x') : "ok";
    return res;
  });
  ASSERT_TRUE(started.ok()) << started.status();
  auto server = std::move(started).value();
  const uint16_t port = server->port();
  std::vector<int> hoarders;
  const std::string big = "GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  hoarders.push_back(SendFrom("127.0.0.2", port, big));
  ASSERT_GE(hoarders.back(), 0);
  // The first answer is queued; once it is, 127.0.0.2 is over its share.
  int over = 0;
  for (int i = 0; i < 100 && over != 503; ++i) {
    std::this_thread::sleep_for(50ms);
    over = StatusFrom("127.0.0.2", port, "/small");
  }
  EXPECT_EQ(over, 503)
      << "a peer holding 8 MiB of unread answers was given more past its 4 MiB share";
  EXPECT_EQ(StatusFrom("127.0.0.3", port, "/small"), 200)
      << "another peer paid for the first one's share";
  // Two more peers take the whole budget (24 MiB queued of 20).
  for (const char* peer : {"127.0.0.3", "127.0.0.4"}) {
    hoarders.push_back(SendFrom(peer, port, big));
    ASSERT_GE(hoarders.back(), 0);
  }
  int spent = 0;
  for (int i = 0; i < 100 && spent != 503; ++i) {
    std::this_thread::sleep_for(50ms);
    spent = StatusFrom("127.0.0.5", port, "/small");
  }
  EXPECT_EQ(spent, 503) << "the whole send budget was spent and a new answer was still queued";
  EXPECT_EQ(StatusFrom("127.0.0.5", port, "/healthz"), 200)
      << "a probe was refused while the budget was spent";
  EXPECT_EQ(StatusFrom("127.0.0.2", port, "/healthz"), 200)
      << "a probe was refused to a peer over its share";
  for (int fd : hoarders) ::close(fd);
  server->Shutdown();
}

}  // namespace
}  // namespace hpo::server
