// A trial's checkpoint directory as one file, for the upload to the server
// and back: the worker archives TrialRun::checkpoint_dir after a pause and
// restores it before a resume (worker/executor.h).
//
// The format (version 1), all text lines but the file contents:
//   "hpo-checkpoint-dir 1\n"
//   per entry, in sorted path order (parents before children):
//     "d <path>\n"                          a directory
//     "f <mode> <size> <path>\n" <size bytes>  a regular file; mode is its
//                                           permission bits in octal
//   "end\n"
// Paths are relative, '/'-separated, with no empty, "." or ".." part and no
// newline. Only regular files and directories are kept: packing a
// directory that holds anything else (a symbolic link, a socket) fails,
// naming it, rather than producing a checkpoint that restores differently.
// Unpacking checks every path and size before writing and refuses trailing
// bytes, so a damaged or hostile archive cannot write outside the target
// directory or restore half a state silently.
#pragma once

#include <string>

#include "common/status.h"

namespace hpo::worker {

// Writes the tree under `dir` to the file `archive` (replacing it).
// InvalidArgument names an entry that cannot be archived; Internal for I/O.
Status PackDirectory(const std::string& dir, const std::string& archive);

// Restores `archive` into `dir`, which must be empty or missing (it is
// created). DataLoss: the archive is damaged (truncated, trailing bytes, an
// unsafe path, a bad header), naming what; Internal for I/O. After a
// failure `dir` may hold part of the tree: the caller empties it.
Status UnpackDirectory(const std::string& archive, const std::string& dir);

}  // namespace hpo::worker
