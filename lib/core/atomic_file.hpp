// Replacing files so that a crash at any moment leaves either the old or the
// new content under the final name, never a mixture, and the new content
// survives a power loss once the call returns.
//
// The pattern: write everything to a temporary name in the same directory
// (rename is only atomic within one file system), fsync the file, rename it
// onto the final name, fsync the directory (the rename itself is directory
// data). Datasets, checkpoints and their `latest` pointer are written this way.
#pragma once

#include <string>

namespace lpsgd {

/// A temporary name for `path` in the same directory, hidden and unique to
/// this process: "dir/.NAME.tmp.PID".
std::string temp_path_for(const std::string& path);

/// fsync()s the file at `path` (runtime error naming it on failure).
void fsync_file(const std::string& path);

/// fsync()s the directory `dir` so renames and removals in it are durable.
void fsync_dir(const std::string& dir);

/// fsync(tmp), rename(tmp, path), fsync(directory of path): makes a completely
/// written temporary file the new `path`. On failure throws naming both files
/// and leaves `path` as it was.
void commit_file(const std::string& tmp, const std::string& path);

/// Replaces `path` with `text` atomically and durably (temp file + commit_file).
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace lpsgd
