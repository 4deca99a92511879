// Backends for the store conformance suite: each makes a fresh, empty
// database per test and can run raw SQL on it (to set up what the public
// interface cannot, like a schema from the future).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "server/store/store.h"

namespace hpo::testing {

// A clock tests can move; starts at a fixed, realistic time.
struct FakeClock {
  std::shared_ptr<std::atomic<int64_t>> now =
      std::make_shared<std::atomic<int64_t>>(1'790'000'000'000);
  std::function<int64_t()> fn() const {
    auto n = now;
    return [n] { return n->load(); };
  }
  void Advance(int64_t ms) { *now += ms; }
};

class SqliteBackend {
 public:
  static constexpr const char* kName = "sqlite";
  // A new file in a new temp dir; removed by the destructor.
  SqliteBackend();
  ~SqliteBackend();
  std::string url() const { return "sqlite://" + path_.string(); }
  void Raw(const std::string& sql);
  static bool Available(std::string* why) { return true; }

 private:
  std::filesystem::path dir_, path_;
};

// Uses the PostgreSQL server named by HPO_TEST_PG_PORT (and HPO_TEST_PG_HOST,
// HPO_TEST_PG_USER), as scripts/test starts it. Creates one database per
// instance and drops it afterwards.
class PostgresBackend {
 public:
  static constexpr const char* kName = "postgresql";
  PostgresBackend();
  ~PostgresBackend();
  std::string url() const { return UrlFor(db_); }
  void Raw(const std::string& sql);
  static bool Available(std::string* why);

 private:
  static std::string UrlFor(const std::string& db);
  std::string db_;
};

// Skips the test (or fails it under HPO_REQUIRE_POSTGRES=1, as in CI) when
// the backend cannot run here.
#define HPO_REQUIRE_BACKEND(Backend)                                                     \
  do {                                                                                   \
    std::string why_;                                                                    \
    if (!Backend::Available(&why_)) {                                                    \
      if (std::getenv("HPO_REQUIRE_POSTGRES")) FAIL() << Backend::kName << ": " << why_; \
      GTEST_SKIP() << Backend::kName << " not available: " << why_;                      \
    }                                                                                    \
  } while (0)

}  // namespace hpo::testing
