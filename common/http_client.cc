#include "common/http_client.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace hpo {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
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
  net::io_context io;
  beast::tcp_stream stream(io);
  HPO_RETURN_IF_ERROR(Connect(o, io, stream));
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  Prepare(o, req);
  if (!body.empty() || method == "POST") {
    req.set(http::field::content_type, content_type);
    req.body() = body;
    req.prepare_payload();
  }
  beast::error_code ec;
  stream.expires_after(o.timeout);
  http::write(stream, req, ec);
  if (ec) return IoError(o, ec);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(256 << 20);
  http::read(stream, buffer, parser, ec);
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
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  return out;
}

Status ReadEventStream(const HttpClientOptions& o, const std::string& target,
                       const std::function<bool(const std::string&, const std::string&)>& on_event) {
  net::io_context io;
  beast::tcp_stream stream(io);
  HPO_RETURN_IF_ERROR(Connect(o, io, stream));
  http::request<http::empty_body> req{http::verb::get, target, 11};
  Prepare(o, req);
  req.set(http::field::accept, "text/event-stream");
  beast::error_code ec;
  stream.expires_after(o.timeout);
  http::write(stream, req, ec);
  if (ec) return IoError(o, ec);
  // Read the header, then raw bytes: the body never ends on its own.
  beast::flat_buffer buffer;
  http::response_parser<http::empty_body> header;
  http::read_header(stream, buffer, header, ec);
  if (ec) return IoError(o, ec);
  if (header.get().result_int() != 200) {
    return Status::Unavailable("event stream answered HTTP " + std::to_string(header.get().result_int()));
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
    const size_t n = stream.read_some(net::buffer(chunk), ec);
    if (ec == net::error::eof || ec == net::error::connection_reset) return Status::OK();
    if (ec) return IoError(o, ec);
    pending.append(chunk, n);
  }
}

Result<HttpClientOptions> ParseServerAddress(const std::string& address) {
  HttpClientOptions o;
  std::string a = address;
  if (a.rfind("http://", 0) == 0) a = a.substr(7);
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
    return Status::InvalidArgument("server address '" + address + "': port '" + port + "' is not 1-65535");
  }
  o.port = static_cast<uint16_t>(p);
  return o;
}

}  // namespace hpo
