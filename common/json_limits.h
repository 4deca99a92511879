// The one way the server turns JSON text it did not build itself into
// values: REST bodies, JSON strings in gRPC fields, experiment specs, and
// what it reads back from its store.
//
// nlohmann's parser is iterative, but much of what is done with a value
// afterwards is not: copying, dump(), operator== and the checks that walk a
// value recurse once per level, so a body of 200k nested arrays (400 KB)
// overflows the stack of the thread that handles it. ParseJson checks the
// limits below in a first pass that builds nothing (a SAX pass), and only
// then builds the value; anything it returns is at most max_depth deep.
#pragma once

#include <climits>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "common/status.h"

namespace hpo {

// Defaults: what an experiment spec may hold (server/spec/spec.h uses the same
// numbers), and so far more than any request body or stored value needs.
inline constexpr int kMaxJsonDepth = 32;          // arrays and objects open at once
inline constexpr size_t kMaxJsonBytes = 1 << 20;  // the text
inline constexpr size_t kMaxJsonValues =
    100'000;  // values, containers included (keys are not values)

struct JsonLimits {
  int max_depth = kMaxJsonDepth;
  size_t max_bytes = kMaxJsonBytes;
  size_t max_values = kMaxJsonValues;
};

// Parses `text` as one JSON value. Errors are InvalidArgument, start with
// `field` and name the limit: "body: nested more than 32 levels deep",
// "body: larger than 1048576 bytes", "body: more than 100000 values", or
// for text that is not JSON "body: not valid JSON (at byte 9: ...)".
// A pair of \u surrogate escapes is one character (as JSON says); a lone
// surrogate is a syntax error whose message says so.
Result<nlohmann::json> ParseJson(std::string_view text, std::string_view field,
                                 const JsonLimits& limits = {});

// As ParseJson, except that text that is not JSON at all gives
// std::nullopt instead of an error, for callers that take such text as a
// plain string. Text that is JSON beyond a limit is still an error (and so
// is any text larger than max_bytes).
Result<std::optional<nlohmann::json>> ParseJsonIfJson(std::string_view text, std::string_view field,
                                                      const JsonLimits& limits = {});

// As ParseJsonIfJson, with text that is not JSON at all kept as a JSON
// string: the worker protocol's values are JSON, and a bare word ("cuda:0"
// rather than "\"cuda:0\"") is taken as the string it says.
Result<nlohmann::json> ParseJsonOrString(std::string_view text, std::string_view field,
                                         const JsonLimits& limits = {});

// How deeply `j` nests: 0 for a scalar, 1 for [] or {"a": 1}, 2 for [[1]].
// Walks with a stack on the heap, so it is safe on a value of any depth
// (one built in code rather than parsed); stops early and returns
// stop_after + 1 once it finds the depth to be beyond stop_after.
int JsonDepth(const nlohmann::json& j, int stop_after = INT_MAX - 1);

}  // namespace hpo
