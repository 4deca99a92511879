#include "server/http/http_server.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

namespace hpo::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
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

void ParseRequestTarget(const std::string& target, HttpRequest& req) {
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

namespace {

const char* Reason(int status) {
  return http::obsolete_reason(static_cast<http::status>(status)).data();
}

// The server's TLS context from PEM files; errors name the file and say
// what is wrong with it.
Result<std::unique_ptr<ssl::context>> ServerTlsContext(const std::string& cert_file, const std::string& key_file) {
  for (const auto* file : {&cert_file, &key_file}) {
    std::ifstream in(*file);
    if (!in) {
      return Status::InvalidArgument(std::string("cannot read TLS ") +
                                     (file == &cert_file ? "certificate" : "key") + " file '" + *file +
                                     "': " + std::strerror(errno));
    }
  }
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                   ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
  beast::error_code ec;
  ctx->use_certificate_chain_file(cert_file, ec);
  if (ec) {
    return Status::InvalidArgument("TLS certificate file '" + cert_file +
                                   "' holds no usable PEM certificate: " + ec.message());
  }
  ctx->use_private_key_file(key_file, ssl::context::pem, ec);
  if (ec) {
    return Status::InvalidArgument("TLS key file '" + key_file + "' holds no usable PEM private key: " +
                                   ec.message());
  }
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    return Status::InvalidArgument("TLS key file '" + key_file + "' does not match the certificate in '" +
                                   cert_file + "'");
  }
  return ctx;
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
  std::unique_ptr<ssl::context> tls;                // null: plain HTTP

  // Stream is tcp::socket or ssl::stream<tcp::socket&>.
  template <typename Stream>
  class SocketWriter final : public StreamWriter {
   public:
    SocketWriter(Stream& s, const std::atomic<bool>& stopping) : s_(s), stopping_(stopping) {}
    bool Write(const std::string& data) override {
      if (stopping_) return false;
      beast::error_code ec;
      net::write(s_, net::buffer(data), ec);
      return !ec;
    }
    bool stopping() const override { return stopping_; }

   private:
    Stream& s_;
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
    // Idle keep-alive connections (and stalled handshakes) must not pin a
    // thread forever.
    timeval tv{options.idle_timeout_s, 0};
    setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    beast::error_code ec;
    std::string remote;
    {
      auto ep = socket.remote_endpoint(ec);
      if (!ec) remote = ep.address().to_string();
    }
    if (!tls) {
      ServeRequests(socket, remote);
    } else {
      // A TLS connection opens with a handshake record (0x16); anything
      // else is most likely plain HTTP, which gets a plain answer.
      unsigned char first = 0;
      const ssize_t n = ::recv(socket.native_handle(), &first, 1, MSG_PEEK);
      if (n == 1 && first != 0x16) {
        RefusePlainHttp(socket);
      } else if (n == 1) {
        ssl::stream<tcp::socket&> stream(socket, *tls);
        stream.handshake(ssl::stream_base::server, ec);
        if (!ec) {
          ServeRequests(stream, remote);
          // close_notify, without waiting for the client's.
          SSL_shutdown(stream.native_handle());
        }
      }
    }
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
  }

  void RefusePlainHttp(tcp::socket& socket) {
    beast::error_code ec;
    char discard[4096];
    socket.read_some(net::buffer(discard), ec);  // so closing does not reset the connection
    http::response<http::string_body> res{http::status::bad_request, 11};
    res.set(http::field::content_type, "text/plain");
    res.body() = "this server speaks HTTPS only: use https://\n";
    res.keep_alive(false);
    res.prepare_payload();
    http::write(socket, res, ec);
  }

  template <typename Stream>
  void ServeRequests(Stream& socket, const std::string& remote) {
    beast::flat_buffer buffer;
    beast::error_code ec;
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
        DrainBeforeClose(socket);
        break;
      }
      if (ec) break;
      const auto& msg = parser.get();
      HttpRequest req;
      req.method = std::string(msg.method_string());
      ParseRequestTarget(std::string(msg.target()), req);
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
  }

  // Reads and drops what the client still sends (for up to 2 s idle and
  // 64 MiB), so that closing with unread data does not reset the
  // connection before the client has read an early answer such as 413.
  template <typename Stream>
  void DrainBeforeClose(Stream& stream) {
    timeval tv{2, 0};
    setsockopt(beast::get_lowest_layer(stream).native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::vector<char> discard(64 << 10);
    beast::error_code ec;
    for (size_t total = 0; total < (size_t{64} << 20) && !stopping;) {
      total += stream.read_some(net::buffer(discard), ec);
      if (ec) break;
    }
  }

  template <typename Stream>
  void Write(Stream& socket, const HttpResponse& r, bool keep_alive, beast::error_code& ec) {
    http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
    res.set(http::field::server, "hpo-server");
    res.set(http::field::content_type, r.content_type);
    for (const auto& [k, v] : r.headers) res.set(k, v);
    res.body() = r.body;
    res.keep_alive(keep_alive);
    res.prepare_payload();
    http::write(socket, res, ec);
  }

  template <typename Stream>
  void StreamResponse(Stream& socket, const HttpResponse& r) {
    std::string head = "HTTP/1.1 " + std::to_string(r.status) + " " + Reason(r.status) +
                       "\r\nContent-Type: " + r.content_type +
                       "\r\nCache-Control: no-cache\r\nConnection: close\r\n";
    for (const auto& [k, v] : r.headers) head += k + ": " + v + "\r\n";
    head += "\r\n";
    beast::error_code ec;
    net::write(socket, net::buffer(head), ec);
    if (ec) return;
    SocketWriter<Stream> w(socket, stopping);
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
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return Status::InvalidArgument("HTTPS needs both a certificate file and a key file");
  }
  if (!options.tls_cert_file.empty()) {
    HPO_ASSIGN_OR_RETURN(impl->tls, ServerTlsContext(options.tls_cert_file, options.tls_key_file));
  }
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
