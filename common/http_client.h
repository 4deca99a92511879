// A minimal blocking HTTP/1.1 client (Boost.Beast) for hpctl and tests:
// one request per call on a fresh connection, with a timeout; HTTPS with
// the server's certificate verified (against tls_ca_file, or the system's
// CAs), always: there is no switch to skip verification.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>

#include "common/status.h"

namespace hpo {

struct HttpResult {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-cased names
};

struct HttpClientOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
  std::string token;  // sent as "Authorization: Bearer <token>" when set
  std::chrono::milliseconds timeout{30'000};
  bool tls = false;         // HTTPS
  std::string tls_ca_file;  // PEM CA certificates to trust; empty: the system's
};

// Unavailable when the server cannot be reached (the message names it),
// DeadlineExceeded on timeout. HTTP error statuses are results, not errors.
Result<HttpResult> HttpRequestOnce(const HttpClientOptions& options, const std::string& method,
                                   const std::string& target, const std::string& body = "",
                                   const std::string& content_type = "application/json");

// Reads a text/event-stream: calls on_event(type, data) for each event until
// it returns false, the stream ends, or the timeout passes.
Status ReadEventStream(const HttpClientOptions& options, const std::string& target,
                       const std::function<bool(const std::string&, const std::string&)>& on_event);

// "host:port", "http://host:port" or "https://host:port" (tls) -> options;
// InvalidArgument naming the text otherwise.
Result<HttpClientOptions> ParseServerAddress(const std::string& address);

}  // namespace hpo
