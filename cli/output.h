// How hpctl writes what it was asked for. What a command was asked for
// (tables, CSV, JSON, a watch view, ids) goes to stdout; errors to stderr as
// one line. --quiet drops what is only news ("submitted experiment 3
// (name)", "cancelled ...", the watch view, "wrote N trials to FILE") and
// keeps the data and the errors.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace hpo::cli {

// --quiet: news goes to Info(), which then writes nowhere.
extern bool g_quiet;
std::ostream& Info();

// A float as a person reads it: four significant digits, without an
// exponent from 0.0001 to a million, without trailing zeros (0.912345678:
// 0.9123; 12.3456: 12.35; 0.5: 0.5; 123456.7: 123457). Tables, watch and
// status show these; JSON and CSV keep every digit.
std::string Rounded(double x);

// A JSON value as the human output shows it: JSON, with its floats Rounded.
std::string Human(const nlohmann::json& v);

// A cell or field of the human output: strings as they are, null as
// nothing, the rest as Human.
std::string Str(const nlohmann::json& v);

// A duration as "1h05m", "3m07s" or "42s".
std::string Seconds(double s);

// Seconds since the epoch, as the server's *_ms fields count them.
double NowSeconds();

// One CSV record (RFC 4180): a cell holding a comma, a quote or a line
// break is quoted, its quotes doubled; what Python's csv module and pandas
// read back as the same strings.
void WriteCsvRow(std::ostream& out, const std::vector<std::string>& cells);

// Rows of cells on stdout as an aligned table ("table"), CSV ("csv"), or
// `raw` as JSON ("json").
void PrintRows(const std::vector<std::string>& header,
               const std::vector<std::vector<std::string>>& rows, const std::string& format,
               const nlohmann::json& raw);

// A stored spec's (GET .../experiments/{id}'s "spec") objective, or its
// first one with several: {metric, direction}; an empty object when it has
// neither.
nlohmann::json FirstObjective(const nlohmann::json& spec);

// The file's text; fails with kUsage when it cannot be read.
std::string ReadFile(const std::string& path);

}  // namespace hpo::cli
