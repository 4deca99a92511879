#include "server/http/http_server.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <list>
#include <mutex>
#include <thread>

namespace hpo::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

std::string UrlDecode(const std::string& s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else if (plus_is_space && s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

namespace {

void ParseTarget(const std::string& target, HttpRequest& req) {
  const auto q = target.find('?');
  req.path = UrlDecode(target.substr(0, q), false);
  if (q == std::string::npos) return;
  const std::string query = target.substr(q + 1);
  size_t start = 0;
  while (start <= query.size()) {
    size_t end = query.find('&', start);
    if (end == std::string::npos) end = query.size();
    const std::string pair = query.substr(start, end - start);
    if (!pair.empty()) {
      const auto eq = pair.find('=');
      req.query[UrlDecode(pair.substr(0, eq), true)] =
          eq == std::string::npos ? "" : UrlDecode(pair.substr(eq + 1), true);
    }
    start = end + 1;
  }
}

const char* Reason(int status) {
  return http::obsolete_reason(static_cast<http::status>(status)).data();
}

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  Handler handler;
  net::io_context io;
  tcp::acceptor acceptor{io};
  uint16_t port = 0;
  std::atomic<bool> stopping{false};
  std::thread accept_thread;

  std::mutex mu;
  std::condition_variable cv;
  std::list<std::shared_ptr<tcp::socket>> sockets;  // GUARDED_BY(mu)
  int active = 0;                                   // GUARDED_BY(mu)

  class SocketWriter final : public StreamWriter {
   public:
    SocketWriter(tcp::socket& s, const std::atomic<bool>& stopping) : s_(s), stopping_(stopping) {}
    bool Write(const std::string& data) override {
      if (stopping_) return false;
      beast::error_code ec;
      net::write(s_, net::buffer(data), ec);
      return !ec;
    }
    bool stopping() const override { return stopping_; }

   private:
    tcp::socket& s_;
    const std::atomic<bool>& stopping_;
  };

  void AcceptLoop() {
    for (;;) {
      auto socket = std::make_shared<tcp::socket>(io);
      beast::error_code ec;
      acceptor.accept(*socket, ec);
      if (stopping) return;
      if (ec) continue;
      std::unique_lock lock(mu);
      if (active >= options.max_connections) {
        lock.unlock();
        RefuseBusy(*socket);
        continue;
      }
      ++active;
      auto it = sockets.insert(sockets.end(), socket);
      lock.unlock();
      std::thread([this, socket, it] {
        Serve(*socket);
        std::lock_guard l(mu);
        sockets.erase(it);
        --active;
        cv.notify_all();
      }).detach();
    }
  }

  void RefuseBusy(tcp::socket& socket) {
    http::response<http::string_body> res{http::status::service_unavailable, 11};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::retry_after, "1");
    res.body() = R"({"error":{"code":"Unavailable","message":"too many connections; retry later"}})";
    res.keep_alive(false);
    res.prepare_payload();
    beast::error_code ec;
    http::write(socket, res, ec);
    socket.shutdown(tcp::socket::shutdown_both, ec);
  }

  void Serve(tcp::socket& socket) {
    // Idle keep-alive connections must not pin a thread forever.
    timeval tv{options.idle_timeout_s, 0};
    setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    beast::flat_buffer buffer;
    beast::error_code ec;
    std::string remote;
    {
      auto ep = socket.remote_endpoint(ec);
      if (!ec) remote = ep.address().to_string();
    }
    while (!stopping) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(options.max_body_bytes);
      http::read(socket, buffer, parser, ec);
      if (ec == http::error::body_limit) {
        HttpResponse too_big;
        too_big.status = 413;
        too_big.body = R"({"error":{"code":"ResourceExhausted","message":"request body is larger than )" +
                       std::to_string(options.max_body_bytes) + R"( bytes"}})";
        Write(socket, too_big, false, ec);
        break;
      }
      if (ec) break;
      const auto& msg = parser.get();
      HttpRequest req;
      req.method = std::string(msg.method_string());
      ParseTarget(std::string(msg.target()), req);
      for (const auto& field : msg) {
        std::string name(field.name_string());
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        req.headers[name] = std::string(field.value());
      }
      req.body = msg.body();
      req.remote = remote;
      HttpResponse res;
      try {
        res = handler(req);
      } catch (const std::exception& e) {
        res = HttpResponse{};
        res.status = 500;
        res.body = R"({"error":{"code":"Internal","message":"unexpected error"}})";
      }
      if (res.stream) {
        StreamResponse(socket, res);
        break;
      }
      const bool keep_alive = msg.keep_alive() && !stopping;
      Write(socket, res, keep_alive, ec);
      if (ec || !keep_alive) break;
    }
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
  }

  void Write(tcp::socket& socket, const HttpResponse& r, bool keep_alive, beast::error_code& ec) {
    http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
    res.set(http::field::server, "hpo-server");
    res.set(http::field::content_type, r.content_type);
    for (const auto& [k, v] : r.headers) res.set(k, v);
    res.body() = r.body;
    res.keep_alive(keep_alive);
    res.prepare_payload();
    http::write(socket, res, ec);
  }

  void StreamResponse(tcp::socket& socket, const HttpResponse& r) {
    std::string head = "HTTP/1.1 " + std::to_string(r.status) + " " + Reason(r.status) +
                       "\r\nContent-Type: " + r.content_type +
                       "\r\nCache-Control: no-cache\r\nConnection: close\r\n";
    for (const auto& [k, v] : r.headers) head += k + ": " + v + "\r\n";
    head += "\r\n";
    beast::error_code ec;
    net::write(socket, net::buffer(head), ec);
    if (ec) return;
    SocketWriter w(socket, stopping);
    r.stream(w);
  }
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Shutdown(); }

uint16_t HttpServer::port() const { return impl_->port; }

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options, Handler handler) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->handler = std::move(handler);
  const std::string where = options.address + ":" + std::to_string(options.port);
  beast::error_code ec;
  const auto address = net::ip::make_address(options.address, ec);
  if (ec) return Status::InvalidArgument("http address '" + options.address + "' is not an IP address");
  tcp::endpoint endpoint{address, options.port};
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return Status::Unavailable("cannot listen on " + where + ": " + ec.message());
  impl->port = impl->acceptor.local_endpoint().port();
  Impl* raw = impl.get();
  impl->accept_thread = std::thread([raw] { raw->AcceptLoop(); });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

void HttpServer::Shutdown() {
  if (!impl_ || impl_->stopping.exchange(true)) return;
  beast::error_code ec;
  // Wake the blocking accept() and every connection blocked in read().
  impl_->acceptor.cancel(ec);
  ::shutdown(impl_->acceptor.native_handle(), SHUT_RDWR);
  impl_->acceptor.close(ec);
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();
  std::unique_lock lock(impl_->mu);
  for (auto& s : impl_->sockets) ::shutdown(s->native_handle(), SHUT_RD);
  impl_->cv.wait(lock, [&] { return impl_->active == 0; });
}

}  // namespace hpo::server
