// One suite over both artifact store backends (typed tests, like
// store_conformance_test.cc): the rules of server/store/artifact_store.h.
// Each backend only says how to open a fresh store and how to damage a
// stored checkpoint the way a disk or an operator might.
#include "server/store/artifact_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "common/sha256.h"
#include "testing/store_backends.h"

namespace hpo::store {
namespace {

namespace fs = std::filesystem;

class FilesBackend {
 public:
  static constexpr const char* kName = "files";
  static bool Available(std::string*) { return true; }
  FilesBackend() {
    char tmpl[] = "/tmp/hpo-artifacts-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  ~FilesBackend() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  Result<std::unique_ptr<ArtifactStore>> Open(ArtifactStoreOptions o) {
    return OpenFileArtifactStore((dir_ / "checkpoints").string(), o);
  }
  std::string File(Id trial) const {
    return (dir_ / "checkpoints" / ("trial-" + std::to_string(trial) + ".ckpt")).string();
  }
  // Flips every bit of the byte at `offset` of the checkpoint's data.
  void FlipByte(Id trial, int64_t offset) {
    std::fstream f(File(trial), std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f) << File(trial);
    f.seekg(256 + offset);  // past the header
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(~c);
    f.seekp(256 + offset);
    f.write(&c, 1);
  }
  // Cuts the last byte off.
  void DropLastByte(Id trial) { fs::resize_file(File(trial), fs::file_size(File(trial)) - 1); }

 private:
  fs::path dir_;
};

class PostgresBackend {
 public:
  static constexpr const char* kName = "postgresql";
  static bool Available(std::string* why) { return hpo::testing::PostgresBackend::Available(why); }
  PostgresBackend() {
    // The artifact tables come with the store's migrations.
    auto s = OpenStore(db_.url());
    EXPECT_TRUE(s.ok()) << s.status();
  }
  Result<std::unique_ptr<ArtifactStore>> Open(ArtifactStoreOptions o) {
    return OpenPostgresArtifactStore(db_.url(), o);
  }
  static std::string Current(Id trial) {
    return "(SELECT id FROM checkpoint_uploads WHERE trial_id = " + std::to_string(trial) +
           " AND committed_ms IS NOT NULL)";
  }
  void FlipByte(Id trial, int64_t offset) {
    const int64_t chunk = int64_t{1} << 20;
    db_.Raw("UPDATE checkpoint_chunks SET data = set_byte(data, " + std::to_string(offset % chunk) +
            ", 255 - get_byte(data, " + std::to_string(offset % chunk) + ")) WHERE upload_id = " +
            Current(trial) + " AND seq = " + std::to_string(offset / chunk));
  }
  void DropLastByte(Id trial) {
    db_.Raw(
        "UPDATE checkpoint_chunks SET data = substring(data FROM 1 FOR length(data) - 1) WHERE "
        "upload_id = " +
        Current(trial) + " AND seq = (SELECT max(seq) FROM checkpoint_chunks WHERE upload_id = " +
        Current(trial) + ")");
  }

 private:
  hpo::testing::PostgresBackend db_;
};

std::string Bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

template <typename Backend>
class ArtifactStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HPO_REQUIRE_BACKEND(Backend);
    backend_ = std::make_unique<Backend>();
    store_ = Open();
  }

  std::unique_ptr<ArtifactStore> Open(int64_t max_bytes = int64_t{64} << 20) {
    ArtifactStoreOptions o;
    o.max_checkpoint_bytes = max_bytes;
    auto s = backend_->Open(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // Writes and commits `data` in pieces of `piece` bytes.
  Status Put(ArtifactStore& store, Id trial, int64_t step, const std::string& data,
             size_t piece = 100'000) {
    HPO_ASSIGN_OR_RETURN(auto w, store.Begin(trial, step, static_cast<int64_t>(data.size())));
    for (size_t i = 0; i < data.size(); i += piece)
      HPO_RETURN_IF_ERROR(w->Append(std::string_view(data).substr(i, piece)));
    return w->Commit(Sha256Hex(data));
  }
  Status Put(Id trial, int64_t step, const std::string& data) {
    return Put(*store_, trial, step, data);
  }

  // Everything a reader hands out, or its error.
  static Result<std::string> ReadAll(CheckpointReader& r, size_t max = 300'000) {
    std::string out;
    for (;;) {
      HPO_ASSIGN_OR_RETURN(std::string piece, r.Read(max));
      if (piece.empty()) return out;
      EXPECT_LE(piece.size(), max);
      out += piece;
    }
  }
  Result<std::string> Get(Id trial) {
    HPO_ASSIGN_OR_RETURN(auto r, store_->Open(trial));
    return ReadAll(*r);
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ArtifactStore> store_;
};

using Backends = ::testing::Types<FilesBackend, PostgresBackend>;
struct BackendNames {
  template <typename T>
  static std::string GetName(int) {
    return T::kName;
  }
};
TYPED_TEST_SUITE(ArtifactStoreTest, Backends, BackendNames);

TYPED_TEST(ArtifactStoreTest, ATrialWithoutACheckpointHasNone) {
  auto st = this->store_->Stat(1);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_FALSE(st->has_value());
  auto r = this->store_->Open(1);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsNotFound()) << r.status();
  EXPECT_TRUE(this->store_->Delete(1).ok()) << "nothing to delete is fine";
  auto ids = this->store_->List();
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_TRUE(ids->empty());
}

TYPED_TEST(ArtifactStoreTest, WhatIsCommittedReadsBackWithItsInfo) {
  // Over two PostgreSQL chunks, in pieces that do not line up with them.
  const std::string data = Bytes((5u << 20) / 2 + 17, 1);
  ASSERT_TRUE(this->Put(7, 3, data).ok());
  auto st = this->store_->Stat(7);
  ASSERT_TRUE(st.ok() && st->has_value()) << st.status();
  EXPECT_EQ((*st)->step, 3);
  EXPECT_EQ((*st)->size_bytes, static_cast<int64_t>(data.size()));
  EXPECT_EQ((*st)->sha256, Sha256Hex(data));
  auto r = this->store_->Open(7);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->info().step, 3);
  EXPECT_EQ((*r)->info().sha256, Sha256Hex(data));
  auto got = this->ReadAll(**r, 65'536);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == data) << "read " << got->size() << " bytes of " << data.size();
  auto again = (*r)->Read(10);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty()) << "the end stays the end";
  EXPECT_EQ(*this->store_->List(), std::vector<Id>{7});
  // A second handle (another replica) sees it too.
  auto other = this->Open();
  auto seen = other->Stat(7);
  ASSERT_TRUE(seen.ok() && seen->has_value());
  EXPECT_EQ((*seen)->sha256, Sha256Hex(data));
}

TYPED_TEST(ArtifactStoreTest, AnEmptyCheckpointIsACheckpoint) {
  ASSERT_TRUE(this->Put(2, 1, "").ok());
  auto got = this->Get(2);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "");
}

TYPED_TEST(ArtifactStoreTest, ANewCheckpointReplacesTheOldOnlyAtCommit) {
  const std::string v1 = Bytes(300'000, 2), v2 = Bytes(1'500'000, 3);
  ASSERT_TRUE(this->Put(5, 1, v1).ok());
  auto w = this->store_->Begin(5, 2, static_cast<int64_t>(v2.size()));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->Append(std::string_view(v2).substr(0, 1'200'000)).ok());
  auto before = this->store_->Stat(5);
  ASSERT_TRUE(before.ok() && before->has_value());
  EXPECT_EQ((*before)->step, 1) << "mid-upload, the old one is the trial's";
  EXPECT_EQ(*this->Get(5), v1);
  // A reader opened now keeps reading the old version after the commit.
  auto old_reader = this->store_->Open(5);
  ASSERT_TRUE(old_reader.ok());
  ASSERT_TRUE((*w)->Append(std::string_view(v2).substr(1'200'000)).ok());
  ASSERT_TRUE((*w)->Commit(Sha256Hex(v2)).ok());
  auto after = this->store_->Stat(5);
  ASSERT_TRUE(after.ok() && after->has_value());
  EXPECT_EQ((*after)->step, 2);
  EXPECT_EQ(*this->Get(5), v2);
  auto old = this->ReadAll(**old_reader);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_TRUE(*old == v1);
}

TYPED_TEST(ArtifactStoreTest, AnAbandonedUploadLeavesThePreviousCheckpoint) {
  const std::string v1 = Bytes(200'000, 4);
  ASSERT_TRUE(this->Put(9, 1, v1).ok());
  {
    auto w = this->store_->Begin(9, 2, 2'000'000);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append(Bytes(2'000'000, 5)).ok());
    // Destroyed complete but without a Commit: the caller gave up.
  }
  auto st = this->store_->Stat(9);
  ASSERT_TRUE(st.ok() && st->has_value());
  EXPECT_EQ((*st)->step, 1);
  EXPECT_EQ(*this->Get(9), v1);
}

TYPED_TEST(ArtifactStoreTest, AProcessKilledMidUploadLeavesThePreviousCheckpoint) {
  const std::string v1 = Bytes(150'000, 6);
  ASSERT_TRUE(this->Put(11, 1, v1).ok());
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Its own connections: nothing of the parent's is shared after fork.
    ArtifactStoreOptions o;
    o.max_checkpoint_bytes = int64_t{64} << 20;
    auto store = this->backend_->Open(o);
    if (!store.ok()) _exit(2);
    auto w = (*store)->Begin(11, 2, 3'000'000);
    if (!w.ok() || !(*w)->Append(Bytes(2'500'000, 7)).ok()) _exit(3);
    const char c = 'x';
    if (write(ready[1], &c, 1) != 1) _exit(4);
    pause();  // killed here, mid-upload
    _exit(5);
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1) << "the child did not get half way";
  close(ready[0]);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  auto st = this->store_->Stat(11);
  ASSERT_TRUE(st.ok() && st->has_value()) << st.status();
  EXPECT_EQ((*st)->step, 1);
  EXPECT_EQ(*this->Get(11), v1);
  auto ids = this->store_->List();
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, std::vector<Id>{11});
  // Delete takes the dead upload's remains too.
  ASSERT_TRUE(this->store_->Delete(11).ok());
  EXPECT_TRUE(this->store_->List()->empty());
}

TYPED_TEST(ArtifactStoreTest, CommitRefusesBytesThatDoNotMatch) {
  const std::string v1 = Bytes(1000, 8), v2 = Bytes(1000, 9);
  ASSERT_TRUE(this->Put(3, 1, v1).ok());
  {
    auto w = this->store_->Begin(3, 2, 1000);
    ASSERT_TRUE((*w)->Append(v2).ok());
    Status s = (*w)->Commit(Sha256Hex(v1));
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find("SHA-256"), std::string::npos) << s;
  }
  {
    auto w = this->store_->Begin(3, 2, 1000);
    ASSERT_TRUE((*w)->Append(v2.substr(0, 999)).ok());
    Status s = (*w)->Commit(Sha256Hex(v2.substr(0, 999)));
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find("999 of the 1000 bytes"), std::string::npos) << s;
  }
  {
    auto w = this->store_->Begin(3, 2, 1000);
    Status s = (*w)->Append(v2 + "x");
    EXPECT_TRUE(s.IsInvalidArgument()) << s;
    EXPECT_NE(s.message().find("1000 bytes announced"), std::string::npos) << s;
  }
  EXPECT_EQ(this->store_->Stat(3)->value().step, 1);
  EXPECT_EQ(*this->Get(3), v1);
  // Upper-case hex is the same checksum.
  std::string upper = Sha256Hex(v2);
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  auto w = this->store_->Begin(3, 2, 1000);
  ASSERT_TRUE((*w)->Append(v2).ok());
  EXPECT_TRUE((*w)->Commit(upper).ok());
  EXPECT_EQ(this->store_->Stat(3)->value().sha256, Sha256Hex(v2));
}

TYPED_TEST(ArtifactStoreTest, ACheckpointOverTheLimitIsRefusedNamingTheLimit) {
  auto small = this->Open(int64_t{1} << 20);
  auto over = small->Begin(4, 1, (int64_t{1} << 20) + 1);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted) << over.status();
  EXPECT_NE(over.status().message().find(
                "1048577 bytes, over the server's limit of 1 MiB (--max-checkpoint-mb)"),
            std::string::npos)
      << over.status();
  EXPECT_EQ(small->max_checkpoint_bytes(), int64_t{1} << 20);
  EXPECT_TRUE(this->Put(*small, 4, 1, Bytes(1u << 20, 10)).ok()) << "at the limit is fine";
  auto negative = small->Begin(4, -1, 10);
  EXPECT_TRUE(!negative.ok() && negative.status().IsInvalidArgument());
  auto negative_size = small->Begin(4, 1, -10);
  EXPECT_TRUE(!negative_size.ok() && negative_size.status().IsInvalidArgument());
}

TYPED_TEST(ArtifactStoreTest, AFlippedByteIsDataLossOnRead) {
  const std::string data = Bytes(1'200'000, 11);
  ASSERT_TRUE(this->Put(6, 4, data).ok());
  this->backend_->FlipByte(6, 1'100'000);
  auto r = this->store_->Open(6);
  ASSERT_TRUE(r.ok()) << "the header is intact: " << r.status();
  auto got = this->ReadAll(**r);
  ASSERT_FALSE(got.ok()) << "a corrupt checkpoint read to its end as if good";
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss) << got.status();
  EXPECT_NE(got.status().message().find("corrupt"), std::string::npos) << got.status();
}

TYPED_TEST(ArtifactStoreTest, ATruncatedCheckpointIsDataLoss) {
  const std::string data = Bytes(70'000, 12);
  ASSERT_TRUE(this->Put(8, 4, data).ok());
  this->backend_->DropLastByte(8);
  // Found at Open (the files say their size) or at the end of reading.
  auto r = this->store_->Open(8);
  Status s = r.ok() ? this->ReadAll(**r).status() : r.status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
}

TYPED_TEST(ArtifactStoreTest, DeleteRemovesOneTrialsCheckpoint) {
  ASSERT_TRUE(this->Put(20, 1, Bytes(100, 13)).ok());
  ASSERT_TRUE(this->Put(21, 1, Bytes(100, 14)).ok());
  auto pending = this->store_->Begin(20, 2, 100);  // an upload in flight
  ASSERT_TRUE(pending.ok());
  ASSERT_TRUE((*pending)->Append(Bytes(100, 15)).ok());
  ASSERT_TRUE(this->store_->Delete(20).ok());
  EXPECT_FALSE(this->store_->Stat(20)->has_value());
  EXPECT_TRUE(this->store_->Open(20).status().IsNotFound());
  EXPECT_EQ(*this->store_->List(), std::vector<Id>{21});
  // The upload that was in flight does not bring the trial's checkpoint
  // back once its trial ended.
  // FailedPrecondition on both backends: no retry of the upload can help.
  Status s = (*pending)->Commit(Sha256Hex(Bytes(100, 15)));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("deleted before it was committed"), std::string::npos) << s;
  EXPECT_FALSE(this->store_->Stat(20)->has_value());
  EXPECT_EQ(*this->Get(21), Bytes(100, 14));
}

TYPED_TEST(ArtifactStoreTest, ConcurrentUploadsOfOneTrialLeaveOneWholeCheckpoint) {
  constexpr int kWriters = 4;
  std::vector<std::thread> threads;
  std::vector<Status> results(kWriters);
  for (int i = 0; i < kWriters; ++i) {
    threads.emplace_back([&, i] {
      results[i] = this->Put(*this->store_, 30, i + 1, Bytes(400'000, 100 + i), 50'000);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : results) EXPECT_TRUE(s.ok()) << s;
  auto st = this->store_->Stat(30);
  ASSERT_TRUE(st.ok() && st->has_value());
  const int64_t step = (*st)->step;
  ASSERT_GE(step, 1);
  ASSERT_LE(step, kWriters);
  EXPECT_EQ(*this->Get(30), Bytes(400'000, 100 + static_cast<uint32_t>(step) - 1));
}

// A full disk (files backend) --------------------------------------------

// The checkpoints' disk fills up: a new checkpoint fails as UNAVAILABLE
// naming the full disk (as the store's SQLITE_FULL does), not as
// RESOURCE_EXHAUSTED, which says "over the size limit" and which a worker
// does not retry; the previous checkpoint stays whole; once space is back
// the same upload goes through. A 1 MiB tmpfs, so it needs root (skips
// otherwise).
TEST(FileArtifactStoreFullDiskTest, AFullDiskIsUnavailableNamingItAndKeepsThePreviousCheckpoint) {
  char tmpl[] = "/tmp/hpo-artifacts-full-XXXXXX";
  const fs::path dir = mkdtemp(tmpl);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m") != 0) {
    const int err = errno;
    fs::remove_all(dir);
    GTEST_SKIP() << "cannot mount a tmpfs (" << std::strerror(err) << "); needs root";
  }
  struct Unmount {
    fs::path dir;
    ~Unmount() {
      ::umount2(dir.c_str(), MNT_DETACH);
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } unmount{dir};
  ArtifactStoreOptions o;
  o.max_checkpoint_bytes = int64_t{64} << 20;
  auto opened = OpenFileArtifactStore((dir / "checkpoints").string(), o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  ArtifactStore& store = **opened;
  auto put = [&](Id trial, int64_t step, const std::string& data) -> Status {
    HPO_ASSIGN_OR_RETURN(auto w, store.Begin(trial, step, static_cast<int64_t>(data.size())));
    for (size_t i = 0; i < data.size(); i += 50'000) {
      HPO_RETURN_IF_ERROR(w->Append(std::string_view(data).substr(i, 50'000)));
    }
    return w->Commit(Sha256Hex(data));
  };
  const std::string v1 = Bytes(100'000, 1), v2 = Bytes(300'000, 2);
  ASSERT_TRUE(put(7, 1, v1).ok());
  {
    // Fill what is left of the disk.
    std::ofstream filler(dir / "filler", std::ios::binary);
    const std::string block(4096, 'x');
    while (filler.write(block.data(), block.size())) filler.flush();
  }
  const Status full = put(7, 2, v2);
  ASSERT_FALSE(full.ok());
  EXPECT_TRUE(full.IsUnavailable()) << full;
  EXPECT_NE(full.message().find("the disk holding the checkpoints is full"), std::string::npos)
      << full;
  auto info = store.Stat(7);
  ASSERT_TRUE(info.ok() && info->has_value()) << info.status();
  EXPECT_EQ((*info)->step, 1) << "the previous checkpoint is still the trial's";
  auto reader = store.Open(7);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::string back;
  for (;;) {
    auto piece = (*reader)->Read(65536);
    ASSERT_TRUE(piece.ok()) << piece.status();
    if (piece->empty()) break;
    back += *piece;
  }
  EXPECT_EQ(back, v1);
  fs::remove(dir / "filler");
  EXPECT_TRUE(put(7, 2, v2).ok()) << "space is back";
  EXPECT_EQ(store.Stat(7)->value().step, 2);
}

// The factory ------------------------------------------------------------

TEST(OpenArtifactStoreTest, DefaultsToADirectoryNextToTheSqliteFile) {
  hpo::testing::SqliteBackend db;
  auto s = OpenArtifactStore("", db.url());
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string dir = fs::path(db.url().substr(9)).parent_path().string() + "/checkpoints";
  EXPECT_EQ((*s)->description(), "files:" + dir);
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_EQ((*s)->max_checkpoint_bytes(), int64_t{1024} << 20) << "1 GiB unless told";
}

TEST(OpenArtifactStoreTest, TakesAConfiguredDirectory) {
  FilesBackend where;
  const std::string dir = fs::path(where.File(1)).parent_path().string() + "/shared";
  auto s = OpenArtifactStore("files:" + dir, "sqlite://:memory:");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->description(), "files:" + dir);
}

TEST(OpenArtifactStoreTest, RefusesWhatCannotWork) {
  auto memory = OpenArtifactStore("", "sqlite://:memory:");
  ASSERT_FALSE(memory.ok());
  EXPECT_TRUE(memory.status().IsInvalidArgument());
  EXPECT_NE(memory.status().message().find("files:DIR"), std::string::npos) << memory.status();
  auto pg = OpenArtifactStore("postgresql", "sqlite:///tmp/x.db");
  ASSERT_FALSE(pg.ok());
  EXPECT_TRUE(pg.status().IsInvalidArgument());
  EXPECT_NE(pg.status().message().find("needs a PostgreSQL store"), std::string::npos)
      << pg.status();
  auto unknown = OpenArtifactStore("s3://bucket", "sqlite:///tmp/x.db");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("expected files:DIR or postgresql"), std::string::npos)
      << unknown.status();
  auto not_dir = OpenArtifactStore("files:/dev/null", "sqlite:///tmp/x.db");
  EXPECT_FALSE(not_dir.ok());
}

}  // namespace
}  // namespace hpo::store
