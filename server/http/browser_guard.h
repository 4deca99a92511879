// What keeps a web page from driving the REST API from a user's browser.
//
// hpo-server commonly runs on a laptop or a cluster node without a token,
// and a token holder may submit command experiments, that is, run code on
// every worker. A page on another site can make the browser send requests
// to 127.0.0.1 (cross-site requests) or, with DNS rebinding, make its own
// name resolve to that address and read the answers too. Three layers stop
// that, each on its own sufficient against one of the two:
//
//  * Host: the request's Host must be an IP address (what a rebinding page
//    cannot use: its origin is its own name), "localhost", or a name the
//    operator allowed (--allowed-host; "*" turns the check off). This stops
//    DNS rebinding.
//  * Origin: a browser names the page's origin on every cross-origin
//    request and on same-origin POSTs. One that is not this server's own
//    (scheme and Host) nor allowed (--allowed-origin; "*" allows any) is
//    refused, for every method. This stops cross-site requests from
//    browsers that send Origin.
//  * Content-Type: a state-changing request (POST, PUT, PATCH, DELETE) must
//    say application/json or application/yaml. A page can send a
//    cross-site request without a CORS preflight only with text/plain,
//    form or multipart bodies (or none); this server answers no preflight,
//    so such a page cannot send these types at all.
//
// /healthz is exempt (it says nothing and load balancers probe it by name).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/http/http_server.h"
#include "server/http/http_status.h"

namespace hpo::server {

struct BrowserGuardOptions {
  // Host names (without a port, or with one to allow only that port)
  // besides IP addresses and localhost; "*" allows any Host.
  std::vector<std::string> allowed_hosts;
  // Origins such as "https://dashboard.example.com" besides the server's
  // own; "*" allows any.
  std::vector<std::string> allowed_origins;
};

// Why a request is refused; answered with ErrorResponse(status, cause)
// (server/http/http_status.h): 403, or 415 for a Content-Type.
struct GuardRefusal {
  Status status;  // PermissionDenied or InvalidArgument, naming the header
  HttpCause cause = HttpCause::kNone;
};

// Host and Origin; nullopt when the request may go on. The API checks
// these before the token (they are about where a request comes from).
std::optional<GuardRefusal> CheckRequestSource(const HttpRequest& req,
                                               const BrowserGuardOptions& options);
// Content-Type of a state-changing request; nullopt when it may go on. The
// API checks it after the token, so an unauthenticated caller learns only
// that it needs one.
std::optional<GuardRefusal> CheckContentType(const HttpRequest& req);

}  // namespace hpo::server
