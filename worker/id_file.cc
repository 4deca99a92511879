#include "worker/id_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

namespace hpo::worker {
namespace {

Status Fail(const std::string& path, const std::string& what) {
  return Status::InvalidArgument("--id-file '" + path + "': " + what);
}

// What the server issues: 32 random bytes as lowercase hex.
bool LooksLikeSecret(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string Dir(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool WriteAll(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

Result<WorkerIdFile> ReadOrCreateIdFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return Fail(path, std::string("cannot read it: ") + std::strerror(errno));
    std::random_device rd;
    char id[33];
    std::snprintf(id, sizeof id, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
    WorkerIdFile created{id, ""};
    HPO_RETURN_IF_ERROR(WriteIdFile(path, created));
    return created;
  }
  std::ifstream in(path);
  if (!in) return Fail(path, std::string("cannot read it: ") + std::strerror(errno));
  WorkerIdFile file;
  std::getline(in, file.instance);
  if (file.instance.empty()) return Fail(path, "its first line (the worker's instance) is empty");
  std::string secret;
  if (std::getline(in, secret) && !secret.empty()) {
    if (!LooksLikeSecret(secret)) {
      return Fail(
          path,
          "its second line is not an identity secret as the server issues them (64 hex digits); "
          "remove the line to register this worker as a new one");
    }
    file.identity_secret = secret;
  }
  return file;
}

Status WriteIdFile(const std::string& path, const WorkerIdFile& file) {
  std::string tmp = path + ".XXXXXX";
  // mkstemp creates the file with mode 0600, exclusively: nothing that was
  // at that name (a planted link) is followed.
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0)
    return Fail(path, std::string("cannot create a file beside it: ") + std::strerror(errno));
  std::string text = file.instance + "\n";
  if (!file.identity_secret.empty()) text += file.identity_secret + "\n";
  const bool written = WriteAll(fd, text) && ::fsync(fd) == 0;
  const int write_errno = errno;
  ::close(fd);
  if (!written) {
    ::unlink(tmp.c_str());
    return Fail(path, std::string("cannot write it: ") + std::strerror(write_errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    ::unlink(tmp.c_str());
    return Fail(path, std::string("cannot replace it: ") + std::strerror(rename_errno));
  }
  // The rename itself survives a crash once the directory is on disk too.
  if (const int dir = ::open(Dir(path).c_str(), O_RDONLY | O_DIRECTORY); dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return Status::OK();
}

}  // namespace hpo::worker
