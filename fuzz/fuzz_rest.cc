// libFuzzer target: REST request handling (RestApi::Handle, with the
// request-target parsing of server/http) over an Engine on a SQLite store in
// a temporary directory, with a dashboard web root beside a file that must
// never be served.
//
// An input is a request in a plain text form, so seeds are easy to write:
//
//   POST /api/v1/experiments?x=1
//   content-type: application/json
//
//   {"name": ...}
//
// The first line is the method and the target; header lines follow until
// an empty line; the rest is the body. The response must have a real HTTP
// status, never 500 (bad input is a 4xx), a JSON body when it says JSON, and
// never the secret file outside the web root. An exception escaping Handle
// is a crash too: the HTTP server would turn it into a 500.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>

#include "server/http/api.h"
#include "server/http/http_server.h"
#include "server/store/store.h"
#include "testing/world.h"

namespace {

using namespace hpo;
using namespace hpo::server;
namespace fs = std::filesystem;

constexpr const char* kSecret = "FUZZ-SECRET-OUTSIDE-THE-WEB-ROOT";

void Fail(const std::string& what, const HttpRequest& req, const HttpResponse& res) {
  std::fprintf(stderr, "%s\nrequest: %s %s\nresponse %d: %.500s\n", what.c_str(),
               req.method.c_str(), req.path.c_str(), res.status, res.body.c_str());
  std::abort();
}

struct World {
  fs::path dir;
  std::unique_ptr<hpo::testing::World> parts;  // store, engine, API
  RestApi* api = nullptr;

  World() {
    char tmpl[] = "/tmp/hpo-fuzz-rest-XXXXXX";
    if (!mkdtemp(tmpl)) std::abort();
    dir = tmpl;
    // web/ is the root; outside/ holds the secret; web/escape links out.
    fs::create_directories(dir / "web" / "sub");
    fs::create_directories(dir / "outside");
    std::ofstream(dir / "web" / "index.html") << "<html>dashboard</html>";
    std::ofstream(dir / "web" / "app.js") << "console.log(1)";
    std::ofstream(dir / "web" / "sub" / "index.html") << "<html>sub</html>";
    std::ofstream(dir / "outside" / "secret.txt") << kSecret;
    std::ofstream(dir / "secret.txt") << kSecret;
    fs::create_directory_symlink(dir / "outside", dir / "web" / "escape");
    fs::create_symlink(dir / "outside" / "secret.txt", dir / "web" / "secret-link.txt");
    hpo::testing::WorldOptions o;
    o.store_url = "sqlite://" + (dir / "hpo.db").string();
    o.api.web_root = (dir / "web").string();
    auto w = hpo::testing::World::Create(std::move(o));
    if (!w.ok()) {
      std::fprintf(stderr, "cannot open the store: %s\n", w.status().ToString().c_str());
      std::abort();
    }
    parts = std::move(w).value();
    api = &parts->api();
  }
  ~World() {
    parts.reset();
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

World& TheWorld() {
  static World* world = [] {
    auto* w = new World;
    std::atexit([] { delete &TheWorld(); });
    return w;
  }();
  return *world;
}

// Writes nothing and says the client is gone after the first chunk, so an
// event stream returns at once.
class OneChunkWriter final : public StreamWriter {
 public:
  bool Write(const std::string&) override { return !std::exchange(done_, true); }
  bool stopping() const override { return done_; }

 private:
  bool done_ = false;
};

HttpRequest ParseInput(const std::string& in) {
  HttpRequest req;
  size_t pos = in.find('\n');
  const std::string first = in.substr(0, pos);
  const size_t space = first.find(' ');
  req.method = first.substr(0, space);
  ParseRequestTarget(space == std::string::npos ? "/" : first.substr(space + 1), req);
  while (pos != std::string::npos) {
    const size_t next = in.find('\n', pos + 1);
    const std::string line =
        in.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
    pos = next;
    if (line.empty()) break;
    const size_t colon = line.find(':');
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = colon == std::string::npos ? "" : line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    req.headers[name] = value;
  }
  if (pos != std::string::npos) req.body = in.substr(pos + 1);
  // What every client sends, unless the input says otherwise: without it
  // every POST of the corpus would stop at the Content-Type check.
  req.headers.emplace("content-type", "application/json");
  req.remote = "127.0.0.1";
  return req;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = TheWorld();
  const HttpRequest req = ParseInput(std::string(reinterpret_cast<const char*>(data), size));
  HttpResponse res;
  try {
    res = w.api->Handle(req);
  } catch (const std::exception& e) {
    Fail(std::string("exception escaped RestApi::Handle: ") + e.what(), req, res);
  }
  if (res.status < 100 || res.status > 599) Fail("not an HTTP status", req, res);
  if (res.status == 500) Fail("500 for a request (bad input must be a 4xx)", req, res);
  // (Error messages quote the request, which may hold the secret's text.)
  if (res.status == 200 && res.body.find(kSecret) != std::string::npos &&
      std::string(reinterpret_cast<const char*>(data), size).find(kSecret) == std::string::npos) {
    Fail("served a file outside the web root", req, res);
  }
  if (res.stream) {
    OneChunkWriter writer;
    res.stream(writer);
  } else if (res.content_type == "application/json" &&
             nlohmann::json::parse(res.body, nullptr, false).is_discarded()) {
    Fail("the body says JSON but is not", req, res);
  }
  return 0;
}
