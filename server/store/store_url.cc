#include "server/store/store_url.h"

#include <regex>

namespace hpo::store {

std::string MaskPassword(const std::string& url) {
  // scheme://user:password@host -> scheme://user:***@host
  static const std::regex kUserInfo(R"(^([A-Za-z][A-Za-z0-9+.-]*://[^:/@?#]*):[^@/?#]*@)");
  // password=secret in a query string or a key/value connection string
  static const std::regex kParam(R"((^|[?&\s])(password)=([^&\s]*))", std::regex::icase);
  std::string out = std::regex_replace(url, kUserInfo, "$1:***@");
  return std::regex_replace(out, kParam, "$1$2=***");
}

Result<StoreUrl> ParseStoreUrl(const std::string& url) {
  StoreUrl out;
  out.display = MaskPassword(url);
  if (url.empty()) {
    return Status::InvalidArgument(
        "store URL is empty (expected sqlite://PATH or postgresql://...)");
  }
  auto starts = [&](std::string_view p) { return url.rfind(p, 0) == 0; };
  if (starts("postgresql://") || starts("postgres://")) {
    const auto rest = url.substr(url.find("://") + 3);
    if (rest.empty() || rest[0] == '?') {
      // libpq would silently use defaults; say what is missing instead.
      if (rest.empty()) {
        return Status::InvalidArgument("store URL '" + out.display +
                                       "' names no PostgreSQL host or database");
      }
    }
    out.backend = StoreUrl::Backend::kPostgresql;
    out.target = url;
    return out;
  }
  if (starts("sqlite:")) {
    if (!starts("sqlite://")) {
      return Status::InvalidArgument("store URL '" + out.display +
                                     "' is malformed: expected sqlite:///absolute/path, "
                                     "sqlite://relative/path or sqlite://:memory:");
    }
    out.target = url.substr(9);
    if (out.target.empty()) {
      return Status::InvalidArgument("store URL '" + out.display + "' names no SQLite file");
    }
    out.backend = StoreUrl::Backend::kSqlite;
    return out;
  }
  const auto scheme_end = url.find("://");
  if (scheme_end != std::string::npos) {
    return Status::InvalidArgument("store URL '" + out.display + "' has unsupported scheme '" +
                                   url.substr(0, scheme_end) +
                                   "' (supported: sqlite://, postgresql://)");
  }
  out.backend = StoreUrl::Backend::kSqlite;  // a plain path
  out.target = url;
  return out;
}

}  // namespace hpo::store
