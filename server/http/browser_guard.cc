#include "server/http/browser_guard.h"

#include <algorithm>
#include <boost/asio/ip/address.hpp>
#include <cctype>

namespace hpo::server {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// "Name:8080" -> {"name", "8080"}; "[::1]:8080" -> {"::1", "8080"}.
std::pair<std::string, std::string> SplitHost(const std::string& authority) {
  const std::string a = Lower(authority);
  if (!a.empty() && a[0] == '[') {
    const auto close = a.find(']');
    if (close == std::string::npos) return {a, ""};
    const std::string port = close + 1 < a.size() && a[close + 1] == ':' ? a.substr(close + 2) : "";
    return {a.substr(1, close - 1), port};
  }
  const auto colon = a.rfind(':');
  if (colon == std::string::npos) return {a, ""};
  return {a.substr(0, colon), a.substr(colon + 1)};
}

bool IsIpAddress(const std::string& host) {
  boost::system::error_code ec;
  boost::asio::ip::make_address(host, ec);
  return !ec;
}

bool Contains(const std::vector<std::string>& list, const std::string& value) {
  return std::any_of(list.begin(), list.end(),
                     [&](const std::string& x) { return Lower(x) == value; });
}

// scheme://host[:port] with the scheme's default port left out, lower-cased.
std::string NormalizedOrigin(const std::string& scheme, const std::string& authority) {
  auto [host, port] = SplitHost(authority);
  if ((scheme == "http" && port == "80") || (scheme == "https" && port == "443")) port.clear();
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return scheme + "://" + h + (port.empty() ? "" : ":" + port);
}

bool ChangesState(const std::string& method) {
  return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE";
}

}  // namespace

std::optional<GuardRefusal> CheckRequestSource(const HttpRequest& req,
                                               const BrowserGuardOptions& options) {
  if (req.path == "/healthz") return std::nullopt;
  const std::string host_header = Trim(req.Header("host"));
  if (!host_header.empty() && !Contains(options.allowed_hosts, "*")) {
    const auto [host, port] = SplitHost(host_header);
    if (!IsIpAddress(host) && host != "localhost" && !Contains(options.allowed_hosts, host) &&
        !Contains(options.allowed_hosts, Lower(host_header))) {
      return GuardRefusal{Status::PermissionDenied(
          "Host '" + host_header.substr(0, 256) +
          "' is not a name this server answers to; an operator allows it with "
          "--allowed-host (IP addresses and localhost are always allowed)")};
    }
  }
  const auto origin = req.headers.find("origin");
  if (origin != req.headers.end() && !Contains(options.allowed_origins, "*")) {
    const std::string given = Lower(Trim(origin->second));
    const auto sep = given.find("://");
    const std::string normalized =
        sep == std::string::npos ? given
                                 : NormalizedOrigin(given.substr(0, sep), given.substr(sep + 3));
    const std::string own = NormalizedOrigin(req.tls ? "https" : "http", host_header);
    bool allowed = !host_header.empty() && normalized == own;
    for (const auto& o : options.allowed_origins) {
      const std::string lo = Lower(o);
      const auto s = lo.find("://");
      allowed = allowed || (s != std::string::npos &&
                            NormalizedOrigin(lo.substr(0, s), lo.substr(s + 3)) == normalized);
    }
    if (!allowed) {
      return GuardRefusal{Status::PermissionDenied(
          "cross-origin request from '" + origin->second.substr(0, 256) +
          "' refused; an operator allows an origin with --allowed-origin")};
    }
  }
  return std::nullopt;
}

std::optional<GuardRefusal> CheckContentType(const HttpRequest& req) {
  if (ChangesState(req.method)) {
    const std::string type =
        Lower(Trim(req.Header("content-type").substr(0, req.Header("content-type").find(';'))));
    if (type != "application/json" && type != "application/yaml" && type != "application/x-yaml") {
      return GuardRefusal{
          Status::InvalidArgument(
              "Content-Type: " +
              (type.empty() ? std::string("missing") : "'" + type.substr(0, 100) + "'") + "; a " +
              req.method +
              " must send application/json or application/yaml (even with an empty body)"),
          HttpCause::kUnsupportedMediaType};
    }
  }
  return std::nullopt;
}

}  // namespace hpo::server
