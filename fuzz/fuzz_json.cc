// libFuzzer target: the limited JSON parser (common/json_limits.h) that
// every JSON from outside the server goes through: REST bodies, JSON strings
// in gRPC fields (a Report's system values), specs, stored values. Any text
// gives a value, "not JSON" or an InvalidArgument; never a crash. A value it
// gives is within the limits, and what the server does with values next
// (copy, compare, dump, parse the dump again) works on it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/json_limits.h"

namespace {

void Fail(const char* what) {
  std::fprintf(stderr, "%s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = hpo::ParseJsonIfJson(text, "value");
  if (!parsed.ok()) {
    if (!parsed.status().IsInvalidArgument()) Fail("an error other than InvalidArgument");
    return 0;
  }
  if (!parsed->has_value()) {
    // Not JSON: ParseJson says why, as an InvalidArgument.
    if (!hpo::ParseJson(text, "value").status().IsInvalidArgument())
      Fail("not JSON, yet no InvalidArgument");
    return 0;
  }
  const nlohmann::json& v = **parsed;
  if (hpo::JsonDepth(v) > hpo::kMaxJsonDepth) Fail("a value nested beyond the limit");
  const nlohmann::json copy = v;
  if (copy != v) Fail("a copy differs");
  // Its text form may be longer than the input (1e5 is 100000.0), so no
  // size limit the second time; the depth and count are the same.
  const std::string dumped = v.dump();
  auto again = hpo::ParseJson(dumped, "dumped",
                              hpo::JsonLimits{hpo::kMaxJsonDepth, SIZE_MAX, hpo::kMaxJsonValues});
  if (!again.ok() || *again != v) Fail("its dump does not parse back to it");
  return 0;
}
