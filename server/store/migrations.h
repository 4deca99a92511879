// Versioned schema migrations, compiled in from sql/<dialect>/NNNN_name.sql
// (see cmake/embed_sql.cmake) so the binary never depends on its cwd.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace hpo::store {

struct Migration {
  int version;
  std::string_view name;
  std::string_view sql;
};

// In version order; versions are 1, 2, 3, ... with no gaps.
const std::vector<Migration>& SqliteMigrations();
const std::vector<Migration>& PostgresqlMigrations();

// Given the version a database has, returns the migrations still to apply.
// FailedPrecondition when the database is newer than `known` (a newer
// binary wrote it): refusing is the only safe choice.
Result<std::vector<const Migration*>> PendingMigrations(const std::vector<Migration>& known,
                                                        int current_version,
                                                        const std::string& display_url);

}  // namespace hpo::store
