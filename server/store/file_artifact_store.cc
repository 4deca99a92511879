// The files backend of the artifact store (see artifact_store.h).
//
// DIR/trial-<id>.ckpt is a checkpoint: a header of kHeaderBytes of text,
//   "hpo-checkpoint 1\ntrial <id>\nstep <n>\nsize <n>\nsha256 <hex>\n",
// padded with spaces to its size (a newline last), then exactly <size>
// bytes. An upload goes to DIR/trial-<id>.ckpt.upload-<unique> and replaces
// the checkpoint by rename(2) only after the bytes matched and were fsynced;
// the directory is fsynced after the rename, so the new name survives a
// power cut too. Until then the old file is untouched.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <random>

#include "common/sha256.h"
#include "server/store/artifact_store.h"

namespace hpo::store {
namespace {

constexpr size_t kHeaderBytes = 256;
constexpr std::string_view kMagic = "hpo-checkpoint 1\n";
constexpr std::string_view kSuffix = ".ckpt";
constexpr std::string_view kUploadInfix = ".ckpt.upload-";

std::string ErrnoText(int err) { return std::strerror(err); }

// An I/O error of the directory: Unavailable, which passes once the cause
// is gone. A full disk says so, as the store's does (SQLITE_FULL, SQLSTATE
// class 53): it is not ResourceExhausted, which the worker protocol keeps
// for a checkpoint over the size limit, a refusal no retry gets past.
Status IoError(const std::string& what, int err) {
  if (err == ENOSPC || err == EDQUOT) {
    return Status::Unavailable(what + ": " + ErrnoText(err) +
                               " (the disk holding the checkpoints is full)");
  }
  return Status::Unavailable(what + ": " + ErrnoText(err));
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int Release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

Status WriteAll(int fd, std::string_view bytes, off_t offset, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        ::pwrite(fd, bytes.data() + done, bytes.size() - done, offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError("cannot write " + path, errno);
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

std::string Header(Id trial_id, int64_t step, int64_t size, std::string_view sha256) {
  std::string h(kMagic);
  h += "trial " + std::to_string(trial_id) + "\nstep " + std::to_string(step) + "\nsize " +
       std::to_string(size) + "\nsha256 " + std::string(sha256) + "\n";
  h.resize(kHeaderBytes - 1, ' ');
  h += '\n';
  return h;
}

// The value of the line "<key> <value>\n" starting at `pos`; advances pos.
std::optional<std::string_view> Field(std::string_view text, size_t& pos, std::string_view key) {
  if (text.substr(pos, key.size()) != key || pos + key.size() >= text.size() ||
      text[pos + key.size()] != ' ') {
    return std::nullopt;
  }
  const size_t begin = pos + key.size() + 1;
  const size_t end = text.find('\n', begin);
  if (end == std::string_view::npos) return std::nullopt;
  pos = end + 1;
  return text.substr(begin, end - begin);
}

std::optional<int64_t> Int(std::optional<std::string_view> s) {
  if (!s || s->empty()) return std::nullopt;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s->data(), s->data() + s->size(), v);
  if (ec != std::errc() || end != s->data() + s->size() || v < 0) return std::nullopt;
  return v;
}

Result<CheckpointInfo> ParseHeader(std::string_view h, Id trial_id, const std::string& path) {
  auto bad = [&](const std::string& why) {
    return Status::DataLoss("checkpoint " + path + " has a damaged header (" + why + ")");
  };
  if (h.size() != kHeaderBytes)
    return bad("shorter than " + std::to_string(kHeaderBytes) + " bytes");
  if (h.substr(0, kMagic.size()) != kMagic) return bad("not a HeteroTune checkpoint");
  size_t pos = kMagic.size();
  const auto trial = Int(Field(h, pos, "trial"));
  const auto step = Int(Field(h, pos, "step"));
  const auto size = Int(Field(h, pos, "size"));
  const auto sha = Field(h, pos, "sha256");
  if (!trial || !step || !size || !sha) return bad("a field is missing or malformed");
  if (*trial != trial_id) return bad("it is trial " + std::to_string(*trial) + "'s");
  if (!IsSha256Hex(*sha)) return bad("the checksum is not 64 hex digits");
  return CheckpointInfo{*step, *size, std::string(*sha)};
}

class FileReader final : public CheckpointReader {
 public:
  FileReader(int fd, CheckpointInfo info, std::string path)
      : fd_(fd), info_(std::move(info)), path_(std::move(path)) {}
  const CheckpointInfo& info() const override { return info_; }

  Result<std::string> Read(size_t max_bytes) override {
    const int64_t left = info_.size_bytes - read_;
    if (left == 0) {
      // Past the end: nothing more may follow, and the bytes must match.
      if (!verified_) {
        char extra;
        const ssize_t n = ::pread(fd_.get(), &extra, 1, static_cast<off_t>(kHeaderBytes + read_));
        if (n > 0)
          return Status::DataLoss("checkpoint " + path_ + " is longer than its header says");
        const std::string got = sha_.HexDigest();
        if (got != info_.sha256) {
          return Status::DataLoss("checkpoint " + path_ + " is corrupt: its SHA-256 is " + got +
                                  ", not " + info_.sha256);
        }
        verified_ = true;
      }
      return std::string();
    }
    std::string out(static_cast<size_t>(std::min<int64_t>(
                        left, static_cast<int64_t>(std::max<size_t>(max_bytes, 1)))),
                    '\0');
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n =
          ::pread(fd_.get(), out.data() + done, out.size() - done,
                  static_cast<off_t>(kHeaderBytes + read_ + static_cast<int64_t>(done)));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return IoError("cannot read " + path_, errno);
      if (n == 0) {
        return Status::DataLoss("checkpoint " + path_ + " is truncated: " +
                                std::to_string(read_ + static_cast<int64_t>(done)) + " of " +
                                std::to_string(info_.size_bytes) + " bytes");
      }
      done += static_cast<size_t>(n);
    }
    read_ += static_cast<int64_t>(done);
    sha_.Update(out);
    return out;
  }

 private:
  Fd fd_;
  CheckpointInfo info_;
  std::string path_;
  int64_t read_ = 0;
  Sha256 sha_;
  bool verified_ = false;
};

class FileArtifactStore;

class FileWriter final : public CheckpointWriter {
 public:
  FileWriter(int fd, std::string tmp, std::string path, std::string dir, Id trial_id, int64_t step,
             int64_t size)
      : fd_(fd),
        tmp_(std::move(tmp)),
        path_(std::move(path)),
        dir_(std::move(dir)),
        trial_id_(trial_id),
        step_(step),
        size_(size) {}
  ~FileWriter() override {
    if (!committed_) {
      fd_.Reset();
      ::unlink(tmp_.c_str());
    }
  }

  Status Append(std::string_view bytes) override {
    if (committed_ || failed_)
      return Status::FailedPrecondition("checkpoint upload " + tmp_ + " has ended");
    if (static_cast<int64_t>(bytes.size()) > size_ - written_) {
      return Status::InvalidArgument("checkpoint of trial " + std::to_string(trial_id_) +
                                     ": more than the " + std::to_string(size_) +
                                     " bytes announced");
    }
    Status s = WriteAll(fd_.get(), bytes, static_cast<off_t>(kHeaderBytes + written_), tmp_);
    if (!s.ok()) {
      failed_ = true;
      return s;
    }
    written_ += static_cast<int64_t>(bytes.size());
    sha_.Update(bytes);
    return Status::OK();
  }

  Status Commit(std::string_view sha256) override {
    if (committed_ || failed_)
      return Status::FailedPrecondition("checkpoint upload " + tmp_ + " has ended");
    failed_ = true;  // whatever happens below, this writer is done
    HPO_ASSIGN_OR_RETURN(const std::string got,
                         VerifyUpload(trial_id_, size_, written_, sha_, sha256));
    HPO_RETURN_IF_ERROR(WriteAll(fd_.get(), Header(trial_id_, step_, size_, got), 0, tmp_));
    if (::fsync(fd_.get()) != 0) return IoError("cannot sync " + tmp_, errno);
    fd_.Reset();
    // ENOENT: Delete removed the upload meanwhile (the trial ended); it
    // must not come back, and no retry would help.
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      if (errno == ENOENT) return UploadDeleted(trial_id_);
      return IoError("cannot rename " + tmp_, errno);
    }
    committed_ = true;
    Fd dir(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir.valid() || ::fsync(dir.get()) != 0)
      return IoError("cannot sync the directory " + dir_, errno);
    return Status::OK();
  }

 private:
  Fd fd_;
  const std::string tmp_, path_, dir_;
  const Id trial_id_;
  const int64_t step_, size_;
  int64_t written_ = 0;
  Sha256 sha_;
  bool committed_ = false;
  bool failed_ = false;
};

class FileArtifactStore final : public ArtifactStore {
 public:
  FileArtifactStore(std::string dir, ArtifactStoreOptions options)
      : dir_(std::move(dir)), options_(options), nonce_(std::random_device{}()) {}

  std::string description() const override { return "files:" + dir_; }
  int64_t max_checkpoint_bytes() const override { return options_.max_checkpoint_bytes; }

  Result<std::unique_ptr<CheckpointWriter>> Begin(Id trial_id, int64_t step,
                                                  int64_t size_bytes) override {
    if (step < 0) return Status::InvalidArgument("step: must be >= 0");
    if (size_bytes < 0) return Status::InvalidArgument("total_bytes: must be >= 0");
    if (size_bytes > options_.max_checkpoint_bytes)
      return CheckpointOverLimit(trial_id, size_bytes, options_);
    // Unique across processes sharing the directory (pid, a random nonce)
    // and threads (a counter).
    const std::string tmp = Path(trial_id) + std::string(kUploadInfix.substr(kSuffix.size())) +
                            std::to_string(::getpid()) + "-" + std::to_string(nonce_) + "-" +
                            std::to_string(counter_.fetch_add(1));
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!fd.valid()) return IoError("cannot create " + tmp, errno);
    // The header's place, rewritten at Commit: the file is never renamed
    // into place before that.
    Status s = WriteAll(fd.get(), Header(trial_id, step, size_bytes, std::string(64, '0')), 0, tmp);
    if (!s.ok()) {
      ::unlink(tmp.c_str());
      return s;
    }
    return std::unique_ptr<CheckpointWriter>(
        new FileWriter(fd.Release(), tmp, Path(trial_id), dir_, trial_id, step, size_bytes));
  }

  Result<std::optional<CheckpointInfo>> Stat(Id trial_id) override {
    HPO_ASSIGN_OR_RETURN(auto opened, OpenFile(trial_id));
    if (!opened) return std::optional<CheckpointInfo>();
    ::close(opened->first);
    return std::optional<CheckpointInfo>(opened->second);
  }

  Result<std::unique_ptr<CheckpointReader>> Open(Id trial_id) override {
    HPO_ASSIGN_OR_RETURN(auto opened, OpenFile(trial_id));
    if (!opened)
      return Status::NotFound("trial " + std::to_string(trial_id) + " has no checkpoint");
    return std::unique_ptr<CheckpointReader>(
        new FileReader(opened->first, opened->second, Path(trial_id)));
  }

  Status Delete(Id trial_id) override {
    if (::unlink(Path(trial_id).c_str()) != 0 && errno != ENOENT) {
      return IoError("cannot delete " + Path(trial_id), errno);
    }
    const std::string prefix = "trial-" + std::to_string(trial_id) + std::string(kUploadInfix);
    HPO_ASSIGN_OR_RETURN(const std::vector<std::string> names, Names());
    for (const std::string& name : names) {
      if (name.rfind(prefix, 0) == 0) ::unlink((dir_ + "/" + name).c_str());
    }
    return Status::OK();
  }

  Result<std::vector<Id>> List() override {
    std::vector<Id> ids;
    HPO_ASSIGN_OR_RETURN(const std::vector<std::string> names, Names());
    for (const std::string& name : names) {
      if (name.rfind("trial-", 0) != 0) continue;
      const size_t end = name.find('.', 6);
      if (end == std::string::npos || name.compare(end, kSuffix.size(), kSuffix) != 0) continue;
      if (auto id = Int(std::string_view(name).substr(6, end - 6))) ids.push_back(*id);
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    return ids;
  }

 private:
  std::string Path(Id trial_id) const {
    return dir_ + "/trial-" + std::to_string(trial_id) + std::string(kSuffix);
  }

  // The names in the directory, or Unavailable. A range-for over
  // directory_iterator throws from its ++ when a readdir fails (EIO, or
  // ESTALE on the network volumes a fleet shares): increment(ec) does not,
  // and nothing here may throw into the server's housekeeping thread.
  Result<std::vector<std::string>> Names() const {
    std::vector<std::string> names;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir_, ec), end; !ec && it != end;
         it.increment(ec)) {
      names.push_back(it->path().filename().string());
    }
    if (ec) return Status::Unavailable("cannot list " + dir_ + ": " + ec.message());
    return names;
  }

  // The open file and its header; nullopt when there is none.
  Result<std::optional<std::pair<int, CheckpointInfo>>> OpenFile(Id trial_id) {
    const std::string path = Path(trial_id);
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) {
      if (errno == ENOENT) return std::optional<std::pair<int, CheckpointInfo>>();
      return IoError("cannot open " + path, errno);
    }
    std::string header(kHeaderBytes, '\0');
    const ssize_t n = ::pread(fd.get(), header.data(), header.size(), 0);
    if (n < 0) return IoError("cannot read " + path, errno);
    header.resize(static_cast<size_t>(n));
    HPO_ASSIGN_OR_RETURN(CheckpointInfo info, ParseHeader(header, trial_id, path));
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return IoError("cannot stat " + path, errno);
    const int64_t body = static_cast<int64_t>(st.st_size) - static_cast<int64_t>(kHeaderBytes);
    if (body != info.size_bytes) {
      return Status::DataLoss("checkpoint " + path + " holds " + std::to_string(body) +
                              " bytes, not the " + std::to_string(info.size_bytes) +
                              " its header says");
    }
    return std::optional<std::pair<int, CheckpointInfo>>(
        std::make_pair(fd.Release(), std::move(info)));
  }

  const std::string dir_;
  const ArtifactStoreOptions options_;
  const uint64_t nonce_;
  std::atomic<uint64_t> counter_{0};
};

}  // namespace

Result<std::unique_ptr<ArtifactStore>> OpenFileArtifactStore(const std::string& dir,
                                                             ArtifactStoreOptions options) {
  if (dir.empty()) return Status::InvalidArgument("--artifacts files:DIR: the directory is empty");
  if (options.max_checkpoint_bytes < 0)
    return Status::InvalidArgument("max_checkpoint_bytes: must be >= 0");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return Status::Unavailable("cannot create the checkpoint directory " + dir + ": " +
                               ec.message());
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::InvalidArgument("--artifacts files:" + dir + ": not a directory");
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    return Status::Unavailable("the checkpoint directory " + dir +
                               " is not writable: " + ErrnoText(errno));
  }
  std::string abs = std::filesystem::absolute(dir, ec).lexically_normal().string();
  if (ec) abs = dir;
  while (abs.size() > 1 && abs.back() == '/') abs.pop_back();
  return std::unique_ptr<ArtifactStore>(new FileArtifactStore(abs, options));
}

}  // namespace hpo::store
