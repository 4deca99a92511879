// Upgrading a database made by an older binary: every row survives each
// migration, on both backends. The old schema is made from the same
// migration files the store applies (the first `version` of them), the way
// that older binary made it.
#include <gtest/gtest.h>

#include "server/store/migrations.h"
#include "server/store/store.h"
#include "testing/store_backends.h"

namespace hpo::store {
namespace {

template <typename Backend>
class StoreMigrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HPO_REQUIRE_BACKEND(Backend);
    backend_ = std::make_unique<Backend>();
  }
  // The schema as the binary of `version` left it.
  void MakeSchemaOf(int version) {
    const auto& all =
        std::string_view(Backend::kName) == "sqlite" ? SqliteMigrations() : PostgresqlMigrations();
    std::string sql =
        "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_ms "
        "BIGINT NOT NULL);";
    for (const auto& m : all) {
      if (m.version > version) break;
      sql += std::string(m.sql) + ";\nINSERT INTO schema_version VALUES (" +
             std::to_string(m.version) + ", '" + std::string(m.name) + "', 0);\n";
    }
    backend_->Raw(sql);
  }
  std::unique_ptr<Backend> backend_;
};

using Backends = ::testing::Types<hpo::testing::SqliteBackend, hpo::testing::PostgresBackend>;
struct BackendNames {
  template <typename T>
  static std::string GetName(int) {
    return T::kName;
  }
};
TYPED_TEST_SUITE(StoreMigrationTest, Backends, BackendNames);

// Version 3 rebuilds SQLite's trials table (to allow 'paused'): the rows
// that refer to trials must still find them (dropping the old table with
// foreign keys enforced would have cascaded into them), and ids must go on
// from the old highest.
TYPED_TEST(StoreMigrationTest, TrialsAndWhatRefersToThemSurviveThePromotionsMigration) {
  this->MakeSchemaOf(2);
  this->backend_->Raw(
      "INSERT INTO experiments (id, name, spec, state, next_number, created_ms, updated_ms) "
      "VALUES (1, 'old', '{}', 'running', 2, 1, 1);"
      "INSERT INTO trials (id, experiment_id, number, params, system_params, state, attempt, "
      "lease_owner, "
      "lease_expires_ms, created_ms, updated_ms) VALUES "
      "(7, 1, 0, '{\"x\":1}', '{}', 'running', 1, 'worker/1', 99999999999999, 1, 1), "
      "(9, 1, 1, '{\"x\":2}', '{}', 'completed', 1, 'worker/1', NULL, 1, 1);"
      "INSERT INTO measurements (trial_id, step, metrics, created_ms) VALUES (7, 1, "
      "'{\"loss\":0.5}', 1), "
      "(7, 2, '{\"loss\":0.4}', 1), (9, 1, '{\"loss\":0.3}', 1);"
      "INSERT INTO workers (id, host, registered_ms, last_seen_ms) VALUES (1, 'h', 1, 1);"
      "INSERT INTO devices (id, worker_id, ordinal, kind, name, device_class) VALUES (1, 1, 0, "
      "'cpu', 'c', 'cpu:c:x1.0');"
      "INSERT INTO speed_observations (device_id, device_class, workload, system_setting, "
      "samples_per_sec, "
      "trial_id, observed_ms) VALUES (1, 'cpu:c:x1.0', 'w', '{}', 100, 7, 1);");
  if (std::string_view(TypeParam::kName) == "postgresql") {
    // The old binary never chose ids: its sequences stand where its rows end.
    this->backend_->Raw(
        "SELECT setval(pg_get_serial_sequence('experiments', 'id'), 1);"
        "SELECT setval(pg_get_serial_sequence('trials', 'id'), 9);"
        "SELECT setval(pg_get_serial_sequence('workers', 'id'), 1);"
        "SELECT setval(pg_get_serial_sequence('devices', 'id'), 1);");
  }
  auto opened = OpenStore(this->backend_->url());
  ASSERT_TRUE(opened.ok()) << opened.status();
  Store& store = **opened;
  // Each dialect's migrations are numbered on their own (PostgreSQL has one
  // more: its checkpoint tables).
  const auto& all =
      std::string_view(TypeParam::kName) == "sqlite" ? SqliteMigrations() : PostgresqlMigrations();
  EXPECT_EQ(*store.SchemaVersion(), all.back().version);
  auto t = store.GetTrial(7);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->state, TrialState::kRunning);
  EXPECT_EQ(t->lease_owner, "worker/1");
  EXPECT_EQ(t->params_json, R"({"x":1})");
  EXPECT_EQ(t->level, 0);
  EXPECT_EQ(t->resume_step, 0);
  EXPECT_FALSE(t->stop_step);
  EXPECT_EQ(store.ListMeasurements(7)->size(), 2u);
  EXPECT_EQ(store.ListMeasurements(9)->size(), 1u);
  auto speeds = *store.ListSpeedObservations("w", 10);
  ASSERT_EQ(speeds.size(), 1u);
  EXPECT_EQ(speeds[0].trial_id, 7) << "the observation still names its trial";
  // The new state works, and ids continue after the old ones.
  ASSERT_TRUE(store.PauseTrial(7, "worker/1", 2).ok());
  auto made = store.CreateTrials(1, {NewTrial{}});
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_GT((*made)[0].id, 9);
  EXPECT_EQ((*made)[0].number, 2);
  EXPECT_EQ(store.CountTrials(1)->total(), 3);
}

}  // namespace
}  // namespace hpo::store
