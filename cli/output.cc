#include "cli/output.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/common.h"

namespace hpo::cli {

bool g_quiet = false;

std::ostream& Info() {
  static std::ostream nowhere(nullptr);
  return g_quiet ? nowhere : std::cout;
}

std::string Rounded(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  const double a = std::fabs(x);
  if (a == 0) return "0";
  char buf[64];
  if (a < 1e-4 || a >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.4g", x);
    return buf;
  }
  const int decimals = std::max(0, 3 - static_cast<int>(std::floor(std::log10(a))));
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  std::string out = buf;
  if (out.find('.') != std::string::npos) {
    out.erase(out.find_last_not_of('0') + 1);
    if (out.back() == '.') out.pop_back();
  }
  return out == "-0" ? "0" : out;
}

std::string Human(const json& v) {
  if (v.is_number_float()) return Rounded(v.get<double>());
  if (!v.is_structured()) return v.dump();
  std::string out = v.is_object() ? "{" : "[";
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it != v.begin()) out += ",";
    if (v.is_object()) out += json(it.key()).dump() + ":";
    out += Human(*it);
  }
  return out + (v.is_object() ? "}" : "]");
}

std::string Str(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  return Human(v);
}

json FirstObjective(const json& spec) {
  if (!spec.is_object()) return json::object();
  const auto several = spec.find("objectives");
  if (several != spec.end() && several->is_array() && !several->empty() &&
      several->front().is_object())
    return several->front();
  const auto one = spec.find("objective");
  return one != spec.end() && one->is_object() ? *one : json::object();
}

std::string Seconds(double s) {
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%dh%02dm", int(s / 3600), int(s / 60) % 60);
  } else if (s >= 60) {
    std::snprintf(buf, sizeof buf, "%dm%02ds", int(s / 60), int(s) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ds", int(s));
  }
  return buf;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void WriteCsvRow(std::ostream& out, const std::vector<std::string>& cells) {
  for (size_t i = 0; i < cells.size(); ++i) {
    const std::string& s = cells[i];
    if (i) out << ',';
    if (s.find_first_of(",\"\r\n") == std::string::npos) {
      out << s;
      continue;
    }
    out << '"';
    for (char c : s) out << (c == '"' ? "\"\"" : std::string(1, c));
    out << '"';
  }
  out << '\n';  // not RFC 4180's CRLF: a line of a Unix pipe; both readers take either
}

void PrintRows(const std::vector<std::string>& header,
               const std::vector<std::vector<std::string>>& rows, const std::string& format,
               const json& raw) {
  if (format == "json") {
    std::cout << raw.dump(2) << "\n";
    return;
  }
  if (format == "csv") {
    WriteCsvRow(std::cout, header);
    for (const auto& r : rows) WriteCsvRow(std::cout, r);
    return;
  }
  std::vector<size_t> width(header.size());
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) {
      std::cout << cells[i];
      if (i + 1 < cells.size()) std::cout << std::string(width[i] - cells[i].size() + 2, ' ');
    }
    std::cout << "\n";
  };
  line(header);
  for (const auto& r : rows) line(r);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) Fail(kUsage, path + ": cannot read the file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace hpo::cli
