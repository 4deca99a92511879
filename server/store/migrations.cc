#include "server/store/migrations.h"

namespace hpo::store {

Result<std::vector<const Migration*>> PendingMigrations(const std::vector<Migration>& known,
                                                        int current_version,
                                                        const std::string& display_url) {
  const int latest = known.empty() ? 0 : known.back().version;
  if (current_version > latest) {
    return Status::FailedPrecondition(
        display_url + ": database schema version " + std::to_string(current_version) +
        " is newer than this binary supports (" + std::to_string(latest) +
        "); upgrade HeteroTune or use another database");
  }
  std::vector<const Migration*> todo;
  int expected = 1;
  for (const Migration& m : known) {
    if (m.version != expected) {
      return Status::Internal("migrations are not numbered 1, 2, 3, ...: found " +
                              std::to_string(m.version) + " where " + std::to_string(expected) +
                              " was expected");
    }
    ++expected;
    if (m.version > current_version) todo.push_back(&m);
  }
  return todo;
}

}  // namespace hpo::store
