// A small HTTP/1.1 server on Boost.Beast. It knows nothing of HeteroTune: a
// Handler maps each request to a response.
//
// Connections cost no thread while they wait: reads and writes are
// asynchronous, each under a deadline (HttpServerOptions), on a few I/O
// threads. Handlers, which may block (on the store), run on a fixed pool of
// handler threads; streaming responses (Server-Sent Events) run on a thread
// of their own each, up to max_streams. So a client that sends nothing,
// sends a byte a second, or never reads its answer holds a socket and a
// buffer for at most one deadline, never a thread, and Shutdown() ends
// within drain_timeout plus what in-flight handlers take.
//
// A request with a body is shown to HttpServerOptions::admit as soon as its
// headers are in, before any byte of the body is read: a caller refuses
// there whoever may not send one (no token, a foreign Origin), so an
// unauthenticated client never makes the server buffer a body.
//
// What a client gets for a request the server cannot take (each a JSON
// error body, then the connection closes): 400 for a malformed request (a
// bad Content-Length, Transfer-Encoding together with Content-Length, ...),
// 413 for a body over max_body_bytes, 431 for headers over 8 KiB, 503 when
// at max_connections with no idle connection to close, when the bodies
// being received already hold max_buffered_request_bytes, or when
// responses waiting to be sent already hold max_pending_response_bytes (or
// the peer's share of it). Requests that is_probe accepts (health checks)
// are answered whatever those budgets hold. A HEAD request is answered with
// the headers of its GET and no body. Those answers, and the 500 for a
// handler that throws, are made by ErrorResponse (server/http/http_status.h),
// the one conversion from Status to HTTP.
//
// Thread-safety: the handler is called from many threads at once.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"

namespace hpo::server {

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string path;                            // decoded, without the query
  std::map<std::string, std::string> query;    // decoded
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string remote;  // peer address, for logs
  bool tls = false;    // it came over HTTPS

  std::string Header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
  }
};

// Writes one chunk of a streaming response; false once the client is gone,
// did not take the chunk within write_timeout, or the server is shutting
// down. Called from the stream's own thread only.
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
  // When set (and body is empty), the body is this file, read from disk as
  // the client takes it: a large file costs no memory while a slow client
  // reads it. A file that cannot be opened then is answered 404.
  std::string file;
  // When set, the body is streamed: the server sends the headers, then
  // calls stream() on a thread of its own until it returns. A stream must
  // return soon after stopping() turns true (the server waits for it).
  std::function<void(StreamWriter&)> stream;
};

struct HttpServerOptions {
  std::string address = "127.0.0.1";
  uint16_t port = 8080;             // 0 binds a free port; see HttpServer::port()
  size_t max_body_bytes = 8 << 20;  // larger requests get 413
  // Open connections. At the cap, a new connection closes the one that has
  // waited longest for its next request; with none waiting it gets 503.
  // Start() lowers it to what the process's descriptor limit allows.
  int max_connections = 4096;
  // From accepting a connection (or from the first byte of a later request
  // on it) to the end of the request's headers; TLS detection and the
  // handshake count in the first. A client that takes longer is closed.
  std::chrono::milliseconds header_timeout{10'000};
  // How long a keep-alive connection may wait for its next request.
  std::chrono::milliseconds idle_timeout{30'000};
  // To receive a request's body once its headers are in (and admitted).
  std::chrono::milliseconds body_timeout{30'000};
  // Bytes of request bodies being received or handled, across connections.
  // A body reserves its Content-Length (a chunked one max_body_bytes) when
  // its headers are admitted, and gives it back when its handler returns;
  // one that does not fit gets 503.
  size_t max_buffered_request_bytes = size_t{64} << 20;
  // Called with a request's method, target and headers (body empty) before
  // its body is read; a response refuses the request: it is sent, the body
  // is never read, and the connection closes. Unset, or for a request
  // without a body, every request goes to the handler, which must make the
  // same checks itself. Called on an I/O thread: it must not block.
  std::function<std::optional<HttpResponse>(const HttpRequest&)> admit;
  // Requests answered whatever the budgets below hold (health probes, which
  // a load balancer must get through to a busy server). Unset: none.
  std::function<bool(const HttpRequest&)> is_probe;
  // To send a response (or one chunk of a stream) to a client that reads
  // slowly or not at all; then the connection is closed and its buffer freed.
  std::chrono::milliseconds write_timeout{30'000};
  // Shutdown(): how long requests in flight may take to finish before
  // every connection is closed.
  std::chrono::milliseconds drain_timeout{5'000};
  int io_threads = 2;  // run the sockets
  int handler_threads =
      16;  // run the handler (it may block on the store) for writes: POST, PUT, ...
  // GET and HEAD requests (dashboards, listings, /metrics) run on a pool of
  // their own, whose threads lower their CPU priority by read_nice (a Linux
  // thread's nice value is its own; 0 leaves it). On a saturated machine
  // the reads then yield the CPU to the writes and to whatever else the
  // process runs at its own priority: the server's worker RPCs, whose
  // leases expire when their answers come late. Reads still get the CPU
  // nobody else wants, so they are slower under load, never starved.
  int read_handler_threads = 4;  // also bounds the store connections reads hold at once
  int read_nice = 0;
  // Which requests are reads; unset: every GET and HEAD. A caller leaves
  // out what must not queue behind reads, such as health probes.
  std::function<bool(const HttpRequest&)> is_read;
  int max_streams = 256;  // streaming responses at once; more get 503
  // Bytes of response bodies produced and not yet sent; beyond it new
  // requests get 503 until slow readers are served or timed out. A file
  // body (HttpResponse::file) counts nothing: Beast reads it from disk a
  // few KiB at a time, as the client takes it.
  size_t max_pending_response_bytes = size_t{256} << 20;
  // One peer address's share of it: clients on one host that never read
  // their answers cannot take the whole budget from everyone else.
  size_t max_pending_response_bytes_per_peer = size_t{32} << 20;
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
  static Result<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                   Handler handler);
  ~HttpServer();

  uint16_t port() const;
  // Stops accepting and closes idle connections at once; requests in flight
  // get drain_timeout to finish (their connections close after the
  // response), then every connection is closed. Returns once in-flight
  // handlers and streams have returned. Idempotent.
  void Shutdown();

  struct Impl;

 private:
  explicit HttpServer(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// Percent-decoding for paths and query strings ('+' is a space in queries).
std::string UrlDecode(const std::string& s, bool plus_is_space);
// A request target ("/a%20b?x=1&y") into req.path and req.query, decoded.
void ParseRequestTarget(const std::string& target, HttpRequest& req);

}  // namespace hpo::server
