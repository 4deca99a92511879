// Parsing of store URLs and masking of the secrets in them.
#pragma once

#include <string>

#include "common/status.h"

namespace hpo::store {

struct StoreUrl {
  enum class Backend { kSqlite, kPostgresql };
  Backend backend = Backend::kSqlite;
  // SQLite: the file path (or ":memory:"). PostgreSQL: the URL libpq gets.
  std::string target;
  // The URL as given, with any password replaced by "***".
  std::string display;
};

// Accepts sqlite:///abs/path, sqlite://rel/path, sqlite://:memory:, a plain
// path (SQLite), postgresql://... and postgres://... (PostgreSQL).
// InvalidArgument (naming the masked URL) for anything else.
Result<StoreUrl> ParseStoreUrl(const std::string& url);

// Replaces the password of a URL (user:PASSWORD@host, or a password=...
// parameter) by "***". Leaves other text unchanged.
std::string MaskPassword(const std::string& url);

}  // namespace hpo::store
