#include "server/http/read_cursor.h"

#include <charconv>

namespace hpo::server {

std::string FormatCursor(const store::ReadCursor& c) {
  return c.store_id + "-" + std::to_string(c.revision);
}

Result<std::optional<int64_t>> SinceRevision(const HttpRequest& req, const store::ReadCursor& now) {
  const auto it = req.query.find("since");
  if (it == req.query.end()) return std::optional<int64_t>();
  const std::string& text = it->second;
  const auto dash = text.rfind('-');
  int64_t revision = 0;
  const char* end = text.data() + text.size();
  bool parsed = dash != std::string::npos && dash > 0 && dash + 1 < text.size();
  if (parsed) {
    // ec too: a number past int64 leaves `revision` 0 with ptr at the end.
    const auto [ptr, ec] = std::from_chars(text.data() + dash + 1, end, revision);
    parsed = ptr == end && ec == std::errc() && revision >= 0;
  }
  if (!parsed) {
    return Status::InvalidArgument("query parameter since: '" + text +
                                   "' is not a cursor (take one from an answer's \"cursor\")");
  }
  if (text.compare(0, dash, now.store_id) != 0 || revision > now.revision) {
    return Status::FailedPrecondition("query parameter since: the cursor '" + text +
                                      "' is from another store (or a restored copy of this one); "
                                      "read everything again without since");
  }
  return std::optional<int64_t>(revision);
}

}  // namespace hpo::server
