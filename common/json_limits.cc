#include "common/json_limits.h"

#include <string>
#include <utility>
#include <vector>

namespace hpo {
namespace {

using nlohmann::json;

// Counts nesting and values as the parser reads, and stops it at the first
// limit passed: nothing is built, so a 1 MB text of brackets costs one scan.
class LimitCheck final : public nlohmann::json_sax<json> {
 public:
  LimitCheck(std::string_view field, const JsonLimits& limits) : field_(field), limits_(limits) {}

  // Set when the text breaks a limit (and then parsing stopped there).
  const std::optional<Status>& beyond_limit() const { return beyond_limit_; }
  // Set when the text is not JSON.
  const std::optional<Status>& syntax_error() const { return syntax_error_; }

  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool key(string_t&) override { return true; }
  bool start_object(std::size_t) override { return Open(); }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(); }
  bool end_array() override { return Close(); }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1,
    // column 9: syntax error while parsing ..."; the part after the
    // position says what was wrong, and the byte says where.
    std::string what = e.what();
    if (const size_t column = what.find("column "); column != std::string::npos) {
      if (const size_t colon = what.find(": ", column); colon != std::string::npos)
        what.erase(0, colon + 2);
    }
    // It quotes the token last read, which may be most of the text.
    constexpr size_t kMaxDetail = 300;
    if (what.size() > kMaxDetail) what = what.substr(0, kMaxDetail) + "...";
    syntax_error_ = Status::InvalidArgument(std::string(field_) + ": not valid JSON (at byte " +
                                            std::to_string(position) + ": " + what + ")");
    return false;
  }

 private:
  bool Value() {
    if (++values_ > limits_.max_values) {
      return Beyond("more than " + std::to_string(limits_.max_values) + " values");
    }
    return true;
  }
  bool Open() {
    if (++depth_ > limits_.max_depth) {
      return Beyond("nested more than " + std::to_string(limits_.max_depth) + " levels deep");
    }
    return Value();
  }
  bool Close() {
    --depth_;
    return true;
  }
  bool Beyond(const std::string& why) {
    beyond_limit_ = Status::InvalidArgument(std::string(field_) + ": " + why);
    return false;
  }

  std::string_view field_;
  const JsonLimits& limits_;
  int depth_ = 0;
  size_t values_ = 0;
  std::optional<Status> beyond_limit_;
  std::optional<Status> syntax_error_;
};

// The checks of both entry points: OK with a value, OK with nullopt (not
// JSON, and `not_json_is_error` is false), or an error.
Result<std::optional<json>> Parse(std::string_view text, std::string_view field,
                                  const JsonLimits& limits, bool not_json_is_error) {
  if (text.size() > limits.max_bytes) {
    return Status::InvalidArgument(std::string(field) + ": larger than " +
                                   std::to_string(limits.max_bytes) + " bytes");
  }
  LimitCheck check(field, limits);
  if (!json::sax_parse(text, &check)) {
    if (check.beyond_limit()) return *check.beyond_limit();
    if (!not_json_is_error) return std::optional<json>();
    if (check.syntax_error()) return *check.syntax_error();
    return Status::InvalidArgument(std::string(field) + ": not valid JSON");
  }
  // Within the limits: now build it (the same parser, so it parses).
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    if (!not_json_is_error) return std::optional<json>();
    return Status::InvalidArgument(std::string(field) + ": not valid JSON");
  }
  return std::optional<json>(std::move(j));
}

}  // namespace

Result<json> ParseJson(std::string_view text, std::string_view field, const JsonLimits& limits) {
  HPO_ASSIGN_OR_RETURN(std::optional<json> j,
                       Parse(text, field, limits, /*not_json_is_error=*/true));
  return std::move(*j);
}

Result<std::optional<json>> ParseJsonIfJson(std::string_view text, std::string_view field,
                                            const JsonLimits& limits) {
  return Parse(text, field, limits, /*not_json_is_error=*/false);
}

Result<json> ParseJsonOrString(std::string_view text, std::string_view field,
                               const JsonLimits& limits) {
  HPO_ASSIGN_OR_RETURN(std::optional<json> j, ParseJsonIfJson(text, field, limits));
  return j ? std::move(*j) : json(std::string(text));
}

int JsonDepth(const json& j, int stop_after) {
  int deepest = 0;
  std::vector<std::pair<const json*, int>> stack = {{&j, 0}};
  while (!stack.empty()) {
    const auto [v, depth] = stack.back();
    stack.pop_back();
    if (!v->is_structured()) continue;
    if (depth + 1 > deepest) deepest = depth + 1;
    if (deepest > stop_after) return stop_after + 1;
    for (const json& child : *v) stack.emplace_back(&child, depth + 1);
  }
  return deepest;
}

}  // namespace hpo
