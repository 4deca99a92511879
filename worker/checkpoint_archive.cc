#include "worker/checkpoint_archive.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

namespace hpo::worker {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kMagic = "hpo-checkpoint-dir 1\n";
constexpr size_t kCopyBytes = size_t{1} << 20;
// Longer lines are not ours: a path this long is refused on both sides.
constexpr size_t kMaxLine = 8192;

bool SafePath(std::string_view p) {
  if (p.empty() || p.front() == '/' || p.size() > kMaxLine - 64) return false;
  size_t start = 0;
  while (start <= p.size()) {
    const size_t end = std::min(p.find('/', start), p.size());
    const std::string_view part = p.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return p.find('\n') == std::string_view::npos && p.find('\0') == std::string_view::npos;
}

Status CopyInto(std::ifstream& in, std::ofstream& out, uint64_t size, const std::string& what) {
  std::vector<char> buf(kCopyBytes);
  while (size > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(size, buf.size()));
    in.read(buf.data(), static_cast<std::streamsize>(n));
    if (static_cast<size_t>(in.gcount()) != n) return Status::DataLoss(what);
    out.write(buf.data(), static_cast<std::streamsize>(n));
    if (!out) return Status::Internal("cannot write: " + std::string(std::strerror(errno)));
    size -= n;
  }
  return Status::OK();
}

}  // namespace

Status PackDirectory(const std::string& dir, const std::string& archive) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return Status::InvalidArgument("checkpoint directory " + dir + " is missing");
  std::vector<fs::path> entries;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    entries.push_back(it->path());
  }
  if (ec) return Status::Internal("cannot list " + dir + ": " + ec.message());
  std::sort(entries.begin(), entries.end());
  std::ofstream out(archive, std::ios::binary | std::ios::trunc);
  if (!out) return Status::Internal("cannot write " + archive + ": " + std::strerror(errno));
  out << kMagic;
  for (const fs::path& p : entries) {
    const std::string rel = p.lexically_relative(dir).generic_string();
    if (!SafePath(rel))
      return Status::InvalidArgument("checkpoint directory entry '" + rel +
                                     "' has a name that cannot be archived");
    const fs::file_status st = fs::symlink_status(p, ec);
    if (ec) return Status::Internal("cannot stat " + p.string() + ": " + ec.message());
    if (fs::is_directory(st)) {
      out << "d " << rel << "\n";
    } else if (fs::is_regular_file(st)) {
      const uint64_t size = fs::file_size(p, ec);
      if (ec) return Status::Internal("cannot stat " + p.string() + ": " + ec.message());
      char mode[8];
      std::snprintf(mode, sizeof mode, "%o", static_cast<unsigned>(st.permissions()) & 0777u);
      out << "f " << mode << " " << size << " " << rel << "\n";
      std::ifstream in(p, std::ios::binary);
      if (!in) return Status::Internal("cannot read " + p.string() + ": " + std::strerror(errno));
      HPO_RETURN_IF_ERROR(CopyInto(in, out, size, p.string() + " changed while it was archived"));
    } else {
      return Status::InvalidArgument(
          "checkpoint directory entry '" + rel +
          "' is neither a regular file nor a directory (symbolic links, sockets and "
          "devices are not saved)");
    }
  }
  out << "end\n";
  out.close();
  if (!out) return Status::Internal("cannot write " + archive + ": " + std::strerror(errno));
  return Status::OK();
}

Status UnpackDirectory(const std::string& archive, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::Internal("cannot create " + dir + ": " + ec.message());
  if (!fs::is_empty(dir, ec))
    return Status::Internal("cannot restore a checkpoint into " + dir + ": not empty");
  std::ifstream in(archive, std::ios::binary);
  if (!in) return Status::Internal("cannot read " + archive + ": " + std::strerror(errno));
  const uint64_t total = fs::file_size(archive, ec);
  if (ec) return Status::Internal("cannot stat " + archive + ": " + ec.message());
  auto damaged = [](const std::string& why) {
    return Status::DataLoss("the checkpoint archive is damaged: " + why);
  };
  auto line = [&](std::string& out) {
    out.clear();
    char c;
    while (in.get(c)) {
      if (c == '\n') return true;
      out += c;
      if (out.size() > kMaxLine) return false;
    }
    return false;
  };
  std::string text;
  if (!line(text) || text + "\n" != kMagic)
    return damaged("it does not start with '" + std::string(kMagic.substr(0, kMagic.size() - 1)) +
                   "'");
  for (int64_t index = 0;; ++index) {
    if (!line(text)) return damaged("it ends before its end marker (truncated)");
    if (text == "end") break;
    const std::string where = "entry " + std::to_string(index);
    if (text.rfind("d ", 0) == 0) {
      const std::string rel = text.substr(2);
      if (!SafePath(rel)) return damaged(where + " has the unsafe path '" + rel + "'");
      fs::create_directories(fs::path(dir) / rel, ec);
      if (ec) return Status::Internal("cannot create " + rel + ": " + ec.message());
      continue;
    }
    if (text.rfind("f ", 0) != 0) return damaged(where + " is neither a file nor a directory");
    // "f <mode> <size> <path>"
    const size_t a = text.find(' ', 2);
    const size_t b = a == std::string::npos ? a : text.find(' ', a + 1);
    if (b == std::string::npos) return damaged(where + " has a malformed header");
    unsigned mode = 0;
    uint64_t size = 0;
    const auto m = std::from_chars(text.data() + 2, text.data() + a, mode, 8);
    const auto s = std::from_chars(text.data() + a + 1, text.data() + b, size);
    if (m.ec != std::errc() || m.ptr != text.data() + a || mode > 0777 || s.ec != std::errc() ||
        s.ptr != text.data() + b) {
      return damaged(where + " has a malformed mode or size");
    }
    const std::string rel = text.substr(b + 1);
    if (!SafePath(rel)) return damaged(where + " has the unsafe path '" + rel + "'");
    const auto here = static_cast<uint64_t>(in.tellg());
    if (size > total - std::min(total, here))
      return damaged(where + " ('" + rel + "') is longer than the archive");
    const fs::path target = fs::path(dir) / rel;
    fs::create_directories(target.parent_path(), ec);
    if (ec)
      return Status::Internal("cannot create " + target.parent_path().string() + ": " +
                              ec.message());
    {
      std::ofstream out(target, std::ios::binary | std::ios::trunc);
      if (!out)
        return Status::Internal("cannot write " + target.string() + ": " + std::strerror(errno));
      HPO_RETURN_IF_ERROR(
          CopyInto(in, out, size, "the checkpoint archive is damaged: '" + rel + "' is truncated"));
      out.close();
      if (!out)
        return Status::Internal("cannot write " + target.string() + ": " + std::strerror(errno));
    }
    fs::permissions(target, static_cast<fs::perms>(mode | 0600u),
                    ec);  // readable and writable by the trial
  }
  char extra;
  if (in.get(extra)) return damaged("bytes follow its end marker");
  return Status::OK();
}

}  // namespace hpo::worker
