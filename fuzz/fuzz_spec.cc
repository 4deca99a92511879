// libFuzzer target: the experiment-spec parser (server/spec/spec.h), YAML and
// JSON. Any text must give a spec or an InvalidArgument; never a crash, a
// hang or a sanitizer report. A spec that parses must parse again from its
// own JSON form (the server stores that form and re-reads it on restart).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "server/spec/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto spec = hpo::server::ParseExperimentSpec(text);
  if (spec.ok()) {
    auto again = hpo::server::ParseExperimentSpec(spec->source);
    if (!again.ok()) {
      std::fprintf(stderr, "spec parsed from text but not from its JSON form: %s\n",
                   again.status().ToString().c_str());
      std::abort();
    }
  }
  // The JSON entry point directly, for what JSON can say that YAML text
  // would not reach the same way (e.g. integers beyond int64).
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_discarded()) (void)hpo::server::ParseExperimentSpec(j);
  return 0;
}
