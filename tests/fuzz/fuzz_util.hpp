// Shared pieces of the libFuzzer harnesses: the input as a file in a private
// temporary directory (the readers under test take paths), and the rule of
// what counts as a finding.
//
// Expected: lpsgd::Error, the library's answer to bad input, with a one-line
// message. Findings: anything else — a crash, a sanitizer report, a leak, a
// hang (libFuzzer's -timeout), another exception (it escapes the harness and
// std::terminate aborts), or an Error whose message is empty or spans lines.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/error.hpp"

namespace lpsgd::fuzz {

/// A directory of this process, removed at exit (left behind after a crash).
inline const std::string& temp_dir() {
  static const std::string dir = [] {
    // /dev/shm keeps the per-input writes in memory where it exists.
    const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string tmpl = std::string(base) + "/lpsgd-fuzz-XXXXXX";
    if (!mkdtemp(tmpl.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    return tmpl;
  }();
  static const bool cleanup = [] {
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(temp_dir(), ec);
    });
    return true;
  }();
  (void)cleanup;
  return dir;
}

/// Writes `size` bytes to temp_dir()/name (replacing it) and returns its path.
inline std::string write_file(const std::string& name, const void* data, size_t size) {
  const std::string path = temp_dir() + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
  return path;
}

/// A finding the harness itself detected: says what and aborts, so libFuzzer
/// saves the input.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "FUZZ FINDING: %s\n", what.c_str());
  std::abort();
}

/// Checks an error message the way a user would see it: one non-empty line.
inline void check_message(const std::string& msg) {
  if (msg.empty()) finding("lpsgd::Error with an empty message");
  if (msg.find_first_of("\n\r") != std::string::npos)
    finding("lpsgd::Error message spans lines: " + msg);
}

/// Runs f; an lpsgd::Error (bad input, reported properly) is expected and
/// swallowed after its message is checked. Returns true when f completed.
template <class F>
bool expect_errors(F&& f) {
  try {
    f();
    return true;
  } catch (const Error& e) {
    check_message(e.message());
    return false;
  }
}

}  // namespace lpsgd::fuzz
