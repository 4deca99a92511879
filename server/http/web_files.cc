#include "server/http/web_files.h"

#include <algorithm>
#include <cctype>
#include <deque>
#include <fstream>
#include <sstream>
#include <vector>

namespace hpo::server {

namespace {

namespace fs = std::filesystem;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

bool IsQuote(char c) { return c == '"' || c == '\'' || c == '`'; }

// The quoted text that starts at text[at] (after spaces), or "" when none.
std::string QuotedAt(const std::string& text, size_t at) {
  while (at < text.size() && std::isspace(static_cast<unsigned char>(text[at]))) ++at;
  if (at >= text.size() || !IsQuote(text[at])) return "";
  const char quote = text[at];
  const size_t end = text.find(quote, at + 1);
  if (end == std::string::npos || end - at - 1 > 1024) return "";
  return text.substr(at + 1, end - at - 1);
}

// Whether `word` stands alone at text[at] (no identifier character around it).
bool WordAt(const std::string& text, size_t at, const std::string& word) {
  auto ident = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$';
  };
  if (text.compare(at, word.size(), word) != 0) return false;
  if (at > 0 && ident(text[at - 1])) return false;
  const size_t after = at + word.size();
  return after >= text.size() || !ident(text[after]);
}

std::vector<std::string> ModuleSpecifiers(const std::string& text) {
  std::vector<std::string> out;
  for (const std::string word : {"from", "import"}) {
    for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
      if (!WordAt(text, at, word)) continue;
      size_t next = at + word.size();
      std::string spec = QuotedAt(text, next);
      if (spec.empty() && word == "import") {  // import("x")
        while (next < text.size() && std::isspace(static_cast<unsigned char>(text[next]))) ++next;
        if (next < text.size() && text[next] == '(') spec = QuotedAt(text, next + 1);
      }
      if (!spec.empty()) out.push_back(spec);
    }
  }
  return out;
}

std::vector<std::string> HtmlReferences(const std::string& text) {
  std::vector<std::string> out;
  for (size_t at = text.find("src="); at != std::string::npos; at = text.find("src=", at + 1)) {
    if (auto v = QuotedAt(text, at + 4); !v.empty()) out.push_back(v);
  }
  for (size_t at = text.find("<link"); at != std::string::npos; at = text.find("<link", at + 1)) {
    const size_t end = text.find('>', at);
    const size_t href = text.find("href=", at);
    if (href == std::string::npos || href > end) continue;
    if (auto v = QuotedAt(text, href + 5); !v.empty()) out.push_back(v);
  }
  return out;
}

std::vector<std::string> CssReferences(const std::string& text) {
  std::vector<std::string> out;
  for (size_t at = text.find("url("); at != std::string::npos; at = text.find("url(", at + 1)) {
    std::string v = QuotedAt(text, at + 4);
    if (v.empty()) {  // url(x) without quotes
      const size_t end = text.find(')', at);
      if (end != std::string::npos) v = text.substr(at + 4, end - at - 4);
    }
    if (!v.empty()) out.push_back(v);
  }
  for (size_t at = text.find("@import"); at != std::string::npos;
       at = text.find("@import", at + 1)) {
    if (auto v = QuotedAt(text, at + 7); !v.empty()) out.push_back(v);
  }
  return out;
}

// The request path `ref` names from the file at request path `from`, or ""
// when it names no file under the root.
std::string Resolve(const std::string& from, std::string ref) {
  ref = ref.substr(0, ref.find_first_of("?#"));
  if (ref.empty() || ref.rfind("//", 0) == 0) return "";
  if (ref[0] != '/' && ref.rfind("./", 0) != 0 && ref.rfind("../", 0) != 0) {
    // Bare names ("echarts") and schemes ("data:", "https:") name no file here.
    return "";
  }
  const fs::path joined = ref[0] == '/' ? fs::path(ref) : fs::path(from).parent_path() / ref;
  const fs::path normal = joined.lexically_normal();
  std::string s = normal.generic_string();
  if (s.empty() || s[0] != '/' || s.find("/..") != std::string::npos) return "";
  return s;
}

}  // namespace

std::optional<fs::path> FileUnderRoot(const fs::path& root, const std::string& path) {
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(root, ec);
  if (ec || path.empty() || path[0] != '/') return std::nullopt;
  const fs::path file = fs::weakly_canonical(base / path.substr(1), ec);
  const auto [end, _] = std::mismatch(base.begin(), base.end(), file.begin(), file.end());
  if (ec || end != base.end() || !fs::is_regular_file(file, ec)) return std::nullopt;
  return file;
}

std::set<std::string> DashboardFiles(const fs::path& root) {
  std::set<std::string> files;
  std::deque<std::string> queue{"/index.html"};
  while (!queue.empty()) {
    const std::string path = queue.front();
    queue.pop_front();
    if (files.count(path)) continue;
    const auto found = FileUnderRoot(root, path);
    if (!found) continue;
    files.insert(path);
    const fs::path& file = *found;
    const std::string ext = file.extension().string();
    std::vector<std::string> refs;
    if (ext == ".html") refs = HtmlReferences(ReadAll(file));
    if (ext == ".js" || ext == ".mjs") refs = ModuleSpecifiers(ReadAll(file));
    if (ext == ".css") refs = CssReferences(ReadAll(file));
    for (const auto& ref : refs) {
      if (std::string next = Resolve(path, ref); !next.empty() && !files.count(next))
        queue.push_back(next);
    }
  }
  return files;
}

}  // namespace hpo::server
