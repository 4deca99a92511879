// The dashboard's own files: what the web root's index.html loads, and
// nothing else under the root (not the npm package tree the chart library
// comes from, with its source maps, sources and tests).
//
// From index.html, the scan follows every src="..." attribute and every
// <link href="...">; from a JavaScript module (.js, .mjs), every static
// `import ... from "x"`, `export ... from "x"`, `import "x"` and dynamic
// `import("x")`; from a stylesheet, every url(x) and @import. A specifier
// that is root-relative ("/js/app.js") or relative to the file that names it
// ("./dom.js", "../api.js") is kept when it names a regular file inside the
// root; bare package names, other schemes (data:, https:) and fragments are
// not files and are skipped. A mention that is no real import (the word
// "from" before a quoted string in a comment) may add a file the code
// names, never one outside the root.
//
// Pure over the file system: it reads, never writes. The server calls it
// once at start, so a file added to the root later is served after a restart.
#pragma once

#include <filesystem>
#include <optional>
#include <set>
#include <string>

namespace hpo::server {

// Request paths ("/index.html", "/js/app.js", ...) of the files the
// dashboard loads; empty when root has no readable index.html.
std::set<std::string> DashboardFiles(const std::filesystem::path& root);

// The regular file that request path `path` ("/js/app.js") names under
// root, symlinks resolved, or nullopt when it is none or lies outside root
// (the one check DashboardFiles and the server's answer both make: a file
// may have become a symlink since the scan).
std::optional<std::filesystem::path> FileUnderRoot(const std::filesystem::path& root,
                                                   const std::string& path);

}  // namespace hpo::server
