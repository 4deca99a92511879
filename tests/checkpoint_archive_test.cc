// The checkpoint directory's archive (worker/checkpoint_archive.h): a tree
// comes back as it was, and a damaged or hostile archive is refused with
// nothing written outside the target.
#include "worker/checkpoint_archive.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "testing/files.h"

namespace hpo::worker {
namespace {

namespace fs = std::filesystem;

using hpo::testing::ReadFile;

void Write(const fs::path& p, const std::string& content) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << content;
}

class CheckpointArchiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hpo-archive-test-XXXXXX";
    root_ = mkdtemp(tmpl);
    src_ = root_ / "src";
    dst_ = root_ / "dst";
    archive_ = (root_ / "a.hpodir").string();
    fs::create_directories(src_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // An archive written by hand, for the damaged cases.
  void WriteArchive(const std::string& body) { Write(archive_, "hpo-checkpoint-dir 1\n" + body); }
  Status Unpack() { return UnpackDirectory(archive_, dst_.string()); }

  fs::path root_, src_, dst_;
  std::string archive_;
};

TEST_F(CheckpointArchiveTest, ATreeComesBackAsItWas) {
  std::mt19937 rng(1);
  std::string big(3 << 20, '\0');
  for (auto& c : big) c = static_cast<char>(rng());
  Write(src_ / "model.bin", big);
  Write(src_ / "state.json", R"({"epoch": 3})");
  Write(src_ / "nested/deeper/empty", "");
  Write(src_ / "with space and\ttab", "x");
  fs::create_directories(src_ / "empty-dir");
  fs::permissions(src_ / "state.json",
                  fs::perms::owner_read | fs::perms::owner_write | fs::perms::owner_exec);
  ASSERT_TRUE(PackDirectory(src_.string(), archive_).ok());
  Status s = UnpackDirectory(archive_, dst_.string());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(ReadFile(dst_ / "model.bin") == big);
  EXPECT_EQ(ReadFile(dst_ / "state.json"), R"({"epoch": 3})");
  EXPECT_TRUE(fs::is_regular_file(dst_ / "nested/deeper/empty"));
  EXPECT_EQ(fs::file_size(dst_ / "nested/deeper/empty"), 0u);
  EXPECT_EQ(ReadFile(dst_ / "with space and\ttab"), "x");
  EXPECT_TRUE(fs::is_directory(dst_ / "empty-dir"));
  EXPECT_NE(fs::status(dst_ / "state.json").permissions() & fs::perms::owner_exec, fs::perms::none)
      << "the mode travels";
}

TEST_F(CheckpointArchiveTest, AnEmptyDirectoryPacksAndUnpacks) {
  ASSERT_TRUE(PackDirectory(src_.string(), archive_).ok());
  EXPECT_EQ(ReadFile(archive_), "hpo-checkpoint-dir 1\nend\n");
  ASSERT_TRUE(Unpack().ok());
  EXPECT_TRUE(fs::is_empty(dst_));
}

TEST_F(CheckpointArchiveTest, OnlyFilesAndDirectoriesArePacked) {
  Write(src_ / "real", "x");
  fs::create_symlink("/etc/passwd", src_ / "link");
  Status s = PackDirectory(src_.string(), archive_);
  EXPECT_TRUE(s.IsInvalidArgument()) << s;
  EXPECT_NE(s.message().find("'link' is neither a regular file nor a directory"), std::string::npos)
      << s;
  Write(src_ / "new\nline", "x");
  fs::remove(src_ / "link");
  s = PackDirectory(src_.string(), archive_);
  EXPECT_TRUE(s.IsInvalidArgument()) << s;
  EXPECT_TRUE(PackDirectory((root_ / "missing").string(), archive_).IsInvalidArgument());
}

TEST_F(CheckpointArchiveTest, DamagedArchivesAreDataLossNamingWhatIsWrong) {
  struct Case {
    std::string body;  // after the first line
    std::string why;
  };
  const std::vector<Case> cases = {
      {"f 644 10 a\n12345", "('a') is longer than the archive"},
      {"f 644 5 a\n12345", "ends before its end marker"},
      {"f 644 5 a\n12345end\nmore", "bytes follow its end marker"},
      {"f 644 1 ../escape\nxend\n", "unsafe path '../escape'"},
      {"f 644 1 /etc/owned\nxend\n", "unsafe path '/etc/owned'"},
      {"d a/./b\nend\n", "unsafe path 'a/./b'"},
      {"d a//b\nend\n", "unsafe path 'a//b'"},
      {"f 999 1 a\nxend\n", "malformed mode or size"},
      {"f 644 -1 a\nend\n", "malformed mode or size"},
      {"l a b\nend\n", "neither a file nor a directory"},
  };
  for (const auto& c : cases) {
    fs::remove_all(dst_);
    WriteArchive(c.body);
    Status s = Unpack();
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << c.why << ": " << s;
    EXPECT_NE(s.message().find(c.why), std::string::npos)
        << "want \"" << c.why << "\" in \"" << s.message() << "\"";
  }
  EXPECT_FALSE(fs::exists(root_ / "escape")) << "nothing written outside the target";
  Write(archive_, "not an archive");
  EXPECT_EQ(Unpack().code(), StatusCode::kDataLoss);
}

TEST_F(CheckpointArchiveTest, UnpacksOnlyIntoAnEmptyDirectory) {
  ASSERT_TRUE(PackDirectory(src_.string(), archive_).ok());
  Write(dst_ / "stale", "old state");
  Status s = Unpack();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not empty"), std::string::npos) << s;
}

}  // namespace
}  // namespace hpo::worker
