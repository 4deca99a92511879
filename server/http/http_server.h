// A small HTTP/1.1 server on Boost.Beast: one thread per connection
// (keep-alive), a cap on connections and body size, idle timeouts, and
// streaming responses for Server-Sent Events. It knows nothing of
// HeteroTune: a Handler maps each request to a response.
//
// Thread-safety: the handler is called from many connection threads at once.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/status.h"

namespace hpo::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // decoded, without the query
  std::map<std::string, std::string> query;    // decoded
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string remote;  // peer address, for logs

  std::string Header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
  }
};

// Writes one chunk of a streaming response; false once the client is gone
// or the server is shutting down.
class StreamWriter {
 public:
  virtual ~StreamWriter() = default;
  virtual bool Write(const std::string& data) = 0;
  virtual bool stopping() const = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::map<std::string, std::string> headers;
  // When set, the body is streamed: the server sends the headers, then
  // calls stream() on the connection's thread until it returns.
  std::function<void(StreamWriter&)> stream;
};

struct HttpServerOptions {
  std::string address = "127.0.0.1";
  uint16_t port = 8080;             // 0 binds a free port; see HttpServer::port()
  size_t max_body_bytes = 8 << 20;  // larger requests get 413
  int max_connections = 512;        // more get 503
  int idle_timeout_s = 60;          // an idle keep-alive connection is closed after this
  // HTTPS when both are set: PEM files of the certificate chain and its
  // private key (TLS 1.2 or newer). A plain HTTP request to an HTTPS server
  // gets a plain 400 saying to use https://, then the connection closes.
  std::string tls_cert_file;
  std::string tls_key_file;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // Binds and starts accepting. Unavailable when the address cannot be bound;
  // InvalidArgument, naming the file, when a TLS file cannot be read or used.
  static Result<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options, Handler handler);
  ~HttpServer();

  uint16_t port() const;
  // Stops accepting, ends streams, waits for in-flight requests, closes.
  void Shutdown();

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Percent-decoding for paths and query strings ('+' is a space in queries).
std::string UrlDecode(const std::string& s, bool plus_is_space);
// A request target ("/a%20b?x=1&y") into req.path and req.query, decoded.
void ParseRequestTarget(const std::string& target, HttpRequest& req);

}  // namespace hpo::server
