// HttpServer's two handler pools: GET and HEAD run on the read pool, at a
// lower CPU priority (read_nice), and a write is answered while every read
// thread is busy. The server is the real one, in this process, with a
// handler that records where each request ran.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
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
  if (base > 14) GTEST_SKIP() << "this test runs at nice " << base << ": no room to lower reads by 5";
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
    reads.push_back(std::async(std::launch::async, [this] { return HttpRequestOnce(client_, "GET", "/block"); }));
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
  if (base > 14) GTEST_SKIP() << "this test runs at nice " << base << ": no room to lower reads by 5";
  HttpServerOptions o;
  o.read_nice = 5;
  o.read_handler_threads = 1;
  o.is_read = [](const HttpRequest& r) { return r.method == "GET" && r.path != "/probe"; };
  Start(o);
  auto blocked = std::async(std::launch::async, [this] { return HttpRequestOnce(client_, "GET", "/block"); });
  ASSERT_TRUE(WaitBlocked(1, 10s)) << "the one read thread should be busy";
  auto probe = HttpRequestOnce(client_, "GET", "/probe");
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_EQ(probe->body, std::to_string(base)) << "answered beside the busy read, at the server's priority";
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

}  // namespace
}  // namespace hpo::server
