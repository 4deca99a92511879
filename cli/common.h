// What every hpctl command shares: its exit codes, how a command fails,
// the server's address (global options and their environment variables),
// and the one place an HTTP answer becomes hpctl's (AnswerOf), as
// server/http/http_status.h is the one place a Status becomes an HTTP one.
//
// Exit codes: 0 success; 1 the server answered with an error (the message
// is printed); 2 bad usage or a bad local file; 3 the server cannot be
// reached; 4 an experiment ended without success (watch/run: failed or
// cancelled); 5 an experiment ended with no result (watch/run: completed,
// but no trial completed or reported the objective); 130 interrupted
// (Ctrl-C). Not 3 for the last: scripts read 3 as "retry, the server is down".
#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "common/http_client.h"

namespace hpo::cli {

struct CompletionHints;  // cli/completion.h

using hpo::HttpClientOptions;
using nlohmann::json;

enum Exit {
  kOk = 0,
  kServerError = 1,
  kUsage = 2,
  kUnreachable = 3,
  kExperimentFailed = 4,
  kNoResult = 5,
  kInterrupted = 130
};

// Set by SIGINT and SIGTERM (InstallSignalHandlers); watch and run stop on it.
extern std::atomic<bool> g_interrupted;
void InstallSignalHandlers();

// What a command failed with: main prints "hpctl: MESSAGE" on stderr and
// exits with `code`.
struct Failure {
  int code;
  std::string message;
};

[[noreturn]] void Fail(int code, const std::string& message);

// A command of hpctl: its CLI11 subcommand and what it does once parsed.
// Exactly one of `local` and `remote` is set.
struct Command {
  CLI::App* app = nullptr;
  // Commands that need no server address (run starts its own; completion).
  std::function<int()> local;
  // The rest, given the server as the global options and environment say.
  std::function<int(const HttpClientOptions&)> remote;
};

// The global options: --server, --tls-ca and -q/--quiet (which sets g_quiet).
struct GlobalOptions {
  std::string server = "127.0.0.1:8080";
  CLI::Option* server_option = nullptr;
  std::string tls_ca;
};
void AddGlobalOptions(CLI::App& app, CompletionHints& hints, GlobalOptions& globals);

// The server to talk to: --server, else HPO_REST_SERVER (or HPO_SERVER, its
// old name, with a warning), else the default; the token from HPO_TOKEN;
// --tls-ca for an https:// server only. Fails with kUsage otherwise.
HttpClientOptions ServerOptions(const GlobalOptions& globals);

// Why the server did not say yes, by what a command may do about it. Most
// commands fail with the answer's message whatever the refusal; `best` and
// watch read kNotFound from GET .../best as "no best yet", and watch reads
// kConflict to a ?since= cursor as "start a full read".
enum class Refusal { kNone, kNotFound, kConflict, kOther };

// One request's answer as hpctl reads it.
struct Answer {
  Refusal refusal = Refusal::kNone;
  json body;        // when refusal is kNone: the parsed body (discarded if not JSON)
  Failure failure;  // otherwise: what the command fails with unless it knows better
  bool ok() const { return refusal == Refusal::kNone; }
};

// The one place an HTTP answer becomes hpctl's outcome:
//  * no answer: kUnreachable (3) with a hint to start the server or set it;
//  * 3xx: kServerError (1) naming the redirect; hpctl follows none, so the
//    request and its token went to --server only;
//  * 4xx and 5xx: kServerError (1) with the server's error.message (the
//    body itself when it has none); 404 is kNotFound, 409 kConflict;
//  * anything else: the parsed body.
Answer AnswerOf(const HttpClientOptions& o, const Result<HttpResult>& response);

// One request, and AnswerOf its response.
Answer Ask(const HttpClientOptions& o, const std::string& method, const std::string& target,
           const std::string& body = "", const std::string& content_type = "application/json");

// The answer's body; fails with its Failure when the server did not say yes.
json BodyOf(const Answer& answer);

// One request whose every refusal is a failure: BodyOf(Ask(...)).
json Call(const HttpClientOptions& o, const std::string& method, const std::string& target,
          const std::string& body = "", const std::string& content_type = "application/json");

// The "/api/v1/experiments/ID" path that most requests start with.
std::string ExperimentPath(int64_t id);

}  // namespace hpo::cli
