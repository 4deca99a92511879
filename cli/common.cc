#include "cli/common.h"

#include <signal.h>

#include <cstdlib>

#include "cli/completion.h"
#include "cli/output.h"
#include "common/cli_env.h"

namespace hpo::cli {

std::atomic<bool> g_interrupted{false};

namespace {

void OnSignal(int) { g_interrupted = true; }

// The message of a 4xx or 5xx answer: the server's {"error": {"message"}}
// (server/http/http_status.h), else the body as it is.
std::string ErrorMessage(const HttpResult& r) {
  const json j = json::parse(r.body, nullptr, false);
  return j.is_object() && j.contains("error") ? j["error"].value("message", r.body) : r.body;
}

// The HTTP client follows no redirect, so the request and its token went to
// --server only. Say so rather than read the redirect's body as an answer.
std::string RedirectMessage(const HttpClientOptions& o, const HttpResult& r) {
  const auto location = r.headers.find("location");
  return "the server at " + std::string(o.tls ? "https://" : "http://") + o.host + ":" +
         std::to_string(o.port) + " answered " + std::to_string(r.status) + ", a redirect " +
         (location == r.headers.end() ? "without a Location" : "to " + location->second) +
         "; hpctl follows no redirect, so the token went nowhere else (hpo-server itself never "
         "redirects; if that address is the server, set --server or HPO_REST_SERVER to it)";
}

Refusal RefusalOf(int http_status) {
  if (http_status == 404) return Refusal::kNotFound;
  if (http_status == 409) return Refusal::kConflict;
  return Refusal::kOther;
}

}  // namespace

void InstallSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

[[noreturn]] void Fail(int code, const std::string& message) { throw Failure{code, message}; }

void AddGlobalOptions(CLI::App& app, CompletionHints& hints, GlobalOptions& globals) {
  // Its variable is read after parsing (ServerOptions, common/cli_env.h):
  // HPO_SERVER, the name it had before, is still read, with a warning.
  globals.server_option = app.add_option("--server", globals.server,
                                         "hpo-server's REST address, HOST:PORT (https://HOST:PORT "
                                         "for HTTPS) (env: HPO_REST_SERVER)")
                              ->capture_default_str();
  Path(hints, app.add_option("--tls-ca", globals.tls_ca,
                             "PEM CA certificate(s) that signed the server's (HTTPS; default: the "
                             "system's)"))
      ->envname("HPO_TLS_CA");
  app.add_flag("-q,--quiet", g_quiet,
               "print only the data asked for and errors, no progress or news");
}

HttpClientOptions ServerOptions(const GlobalOptions& globals) {
  std::string server = globals.server;
  if (globals.server_option->count() == 0) {
    const std::string from_environment =
        hpo::RenamedVariable("hpctl", "HPO_REST_SERVER", "HPO_SERVER",
                             "hpctl reads it as the REST address, hpo-worker as the gRPC one");
    if (!from_environment.empty()) server = from_environment;
  }
  auto parsed = hpo::ParseServerAddress(server);
  if (!parsed.ok()) Fail(kUsage, parsed.status().message());
  HttpClientOptions o = *parsed;
  if (const char* t = std::getenv("HPO_TOKEN")) o.token = t;
  if (!globals.tls_ca.empty()) {
    if (!o.tls) Fail(kUsage, "--tls-ca needs an https:// --server");
    o.tls_ca_file = globals.tls_ca;
  }
  return o;
}

Answer AnswerOf(const HttpClientOptions& o, const Result<HttpResult>& response) {
  Answer answer;
  if (!response.ok()) {
    answer.refusal = Refusal::kOther;
    answer.failure = {
        kUnreachable,
        response.status().message() + " (is hpo-server running? set --server or HPO_REST_SERVER)"};
    return answer;
  }
  const HttpResult& r = *response;
  if (r.status >= 300 && r.status < 400) {
    answer.refusal = Refusal::kOther;
    answer.failure = {kServerError, RedirectMessage(o, r)};
    return answer;
  }
  if (r.status >= 400) {
    answer.refusal = RefusalOf(r.status);
    answer.failure = {kServerError, ErrorMessage(r)};
    return answer;
  }
  answer.body = json::parse(r.body, nullptr, false);
  return answer;
}

Answer Ask(const HttpClientOptions& o, const std::string& method, const std::string& target,
           const std::string& body, const std::string& content_type) {
  return AnswerOf(o, hpo::HttpRequestOnce(o, method, target, body, content_type));
}

json BodyOf(const Answer& answer) {
  if (!answer.ok()) throw answer.failure;
  return answer.body;
}

json Call(const HttpClientOptions& o, const std::string& method, const std::string& target,
          const std::string& body, const std::string& content_type) {
  return BodyOf(Ask(o, method, target, body, content_type));
}

std::string ExperimentPath(int64_t id) { return "/api/v1/experiments/" + std::to_string(id); }

}  // namespace hpo::cli
