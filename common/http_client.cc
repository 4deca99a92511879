#include "common/http_client.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fstream>
#include <optional>

namespace hpo {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;

namespace {

Status Connect(const HttpClientOptions& o, net::io_context& io, beast::tcp_stream& stream) {
  const std::string where = o.host + ":" + std::to_string(o.port);
  beast::error_code ec;
  tcp::resolver resolver(io);
  auto results = resolver.resolve(o.host, std::to_string(o.port), ec);
  if (ec) return Status::Unavailable("cannot resolve " + where + ": " + ec.message());
  stream.expires_after(o.timeout);
  stream.connect(results, ec);
  if (ec) return Status::Unavailable("cannot connect to " + where + ": " + ec.message());
  // tcp_stream's expiry only governs asynchronous calls; these are
  // blocking, so the socket itself carries the timeout.
  const auto ms = o.timeout.count();
  timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
  setsockopt(stream.socket().native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(stream.socket().native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return Status::OK();
}

// A connected stream, over TLS when the options say so; Visit calls f with
// the plain socket or the TLS stream (both blocking).
class Connection {
 public:
  Status Open(const HttpClientOptions& o) {
    HPO_RETURN_IF_ERROR(Connect(o, io_, tcp_));
    if (!o.tls) return Status::OK();
    const std::string where = o.host + ":" + std::to_string(o.port);
    beast::error_code ec;
    if (!o.tls_ca_file.empty()) {
      if (!std::ifstream(o.tls_ca_file)) {
        return Status::InvalidArgument("cannot read the CA file '" + o.tls_ca_file + "'");
      }
      ctx_.load_verify_file(o.tls_ca_file, ec);
      if (ec)
        return Status::InvalidArgument("CA file '" + o.tls_ca_file + "' holds no PEM certificate");
    } else {
      ctx_.set_default_verify_paths(ec);
    }
    ctx_.set_verify_mode(ssl::verify_peer);
    // The certificate must name the host we asked for (a DNS name or an IP).
    ctx_.set_verify_callback(ssl::host_name_verification(o.host));
    tls_.emplace(tcp_.socket(), ctx_);
    beast::error_code parse_ec;
    net::ip::make_address(o.host, parse_ec);
    if (parse_ec)
      SSL_set_tlsext_host_name(tls_->native_handle(), o.host.c_str());  // SNI: names only
    tls_->handshake(ssl::stream_base::client, ec);
    if (ec) {
      std::string why = ec.message();
      if (ec.category() == net::error::get_ssl_category()) {
        const long verify = SSL_get_verify_result(tls_->native_handle());
        if (verify != X509_V_OK) why = X509_verify_cert_error_string(verify);
      }
      return Status::Unavailable(
          "TLS handshake with " + where + " failed: " + why +
          (o.tls_ca_file.empty() ? " (is the server's CA given with --tls-ca?)" : ""));
    }
    return Status::OK();
  }
  template <typename F>
  auto Visit(F f) {
    if (tls_) return f(*tls_);
    return f(tcp_.socket());
  }
  void Close() {
    beast::error_code ec;
    if (tls_)
      SSL_shutdown(tls_->native_handle());  // close_notify, without waiting for the server's
    tcp_.socket().shutdown(tcp::socket::shutdown_both, ec);
  }

 private:
  net::io_context io_;
  beast::tcp_stream tcp_{io_};
  ssl::context ctx_{ssl::context::tls_client};
  std::optional<ssl::stream<tcp::socket&>> tls_;
};

template <typename Request>
void Prepare(const HttpClientOptions& o, Request& req) {
  req.set(http::field::host, o.host);
  req.set(http::field::user_agent, "hpctl");
  if (!o.token.empty()) req.set(http::field::authorization, "Bearer " + o.token);
}

Status IoError(const HttpClientOptions& o, const beast::error_code& ec) {
  const std::string where = o.host + ":" + std::to_string(o.port);
  if (ec == beast::error::timeout || ec == net::error::would_block || ec == net::error::try_again ||
      ec == net::error::timed_out) {
    return Status::DeadlineExceeded("no answer from " + where + " within " +
                                    std::to_string(o.timeout.count()) + " ms");
  }
  return Status::Unavailable("connection to " + where + " failed: " + ec.message());
}

}  // namespace

Result<HttpResult> HttpRequestOnce(const HttpClientOptions& o, const std::string& method,
                                   const std::string& target, const std::string& body,
                                   const std::string& content_type) {
  Connection conn;
  HPO_RETURN_IF_ERROR(conn.Open(o));
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  Prepare(o, req);
  // Every state-changing request says what it sends, even with no body
  // (the server refuses one that does not: server/http/browser_guard.h).
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH" ||
      method == "DELETE") {
    req.set(http::field::content_type, content_type);
    req.body() = body;
    req.prepare_payload();
  }
  beast::error_code ec;
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(256 << 20);
  conn.Visit([&](auto& stream) {
    http::write(stream, req, ec);
    if (!ec) http::read(stream, buffer, parser, ec);
  });
  if (ec) return IoError(o, ec);
  HttpResult out;
  const auto& res = parser.get();
  out.status = static_cast<int>(res.result_int());
  out.body = res.body();
  for (const auto& f : res) {
    std::string name(f.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.headers[name] = std::string(f.value());
  }
  conn.Close();
  return out;
}

Status ReadEventStream(
    const HttpClientOptions& o, const std::string& target,
    const std::function<bool(const std::string&, const std::string&)>& on_event) {
  Connection conn;
  HPO_RETURN_IF_ERROR(conn.Open(o));
  http::request<http::empty_body> req{http::verb::get, target, 11};
  Prepare(o, req);
  req.set(http::field::accept, "text/event-stream");
  beast::error_code ec;
  // Read the header, then raw bytes: the body never ends on its own.
  beast::flat_buffer buffer;
  http::response_parser<http::empty_body> header;
  conn.Visit([&](auto& stream) {
    http::write(stream, req, ec);
    if (!ec) http::read_header(stream, buffer, header, ec);
  });
  if (ec) return IoError(o, ec);
  if (header.get().result_int() != 200) {
    return Status::Unavailable("event stream answered HTTP " +
                               std::to_string(header.get().result_int()));
  }
  std::string pending = beast::buffers_to_string(buffer.data());
  std::string type, data;
  char chunk[4096];
  for (;;) {
    size_t pos;
    while ((pos = pending.find('\n')) != std::string::npos) {
      const std::string line = pending.substr(0, pos);
      pending.erase(0, pos + 1);
      if (line.empty()) {
        if (!data.empty() || !type.empty()) {
          if (!on_event(type.empty() ? "message" : type, data)) return Status::OK();
        }
        type.clear();
        data.clear();
      } else if (line.rfind("event: ", 0) == 0) {
        type = line.substr(7);
      } else if (line.rfind("data: ", 0) == 0) {
        data += line.substr(6);
      }
    }
    const size_t n =
        conn.Visit([&](auto& stream) { return stream.read_some(net::buffer(chunk), ec); });
    if (ec == net::error::eof || ec == net::error::connection_reset ||
        ec == ssl::error::stream_truncated) {
      return Status::OK();
    }
    if (ec) return IoError(o, ec);
    pending.append(chunk, n);
  }
}

Result<HttpClientOptions> ParseServerAddress(const std::string& address) {
  HttpClientOptions o;
  std::string a = address;
  if (a.rfind("http://", 0) == 0) a = a.substr(7);
  if (a.rfind("https://", 0) == 0) {
    a = a.substr(8);
    o.tls = true;
  }
  while (!a.empty() && a.back() == '/') a.pop_back();
  const auto colon = a.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == a.size()) {
    return Status::InvalidArgument("server address '" + address + "' must be HOST:PORT");
  }
  o.host = a.substr(0, colon);
  const std::string port = a.substr(colon + 1);
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (*end != '\0' || p < 1 || p > 65535) {
    return Status::InvalidArgument("server address '" + address + "': port '" + port +
                                   "' is not 1-65535");
  }
  o.port = static_cast<uint16_t>(p);
  return o;
}

}  // namespace hpo
