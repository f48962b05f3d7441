// Command-line and INI-file options for every lpsgd subcommand.
//
// Each subcommand describes its options with Boost.Program_options; parse()
// adds --help and --config FILE, reads the INI file (keys are option names,
// sections are ignored-prefix-free: `epochs = 5`), and lets the command line win.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace lpsgd::cli {

namespace po = boost::program_options;

/// Parses argv (argv[0] is the subcommand name) into vm. Returns false when
/// --help was given (usage printed on rank 0); throws a usage Error otherwise.
bool parse(int argc, char** argv, const po::options_description& desc, po::variables_map& vm,
           const std::string& usage,
           const po::positional_options_description* positional = nullptr);

/// "65536", "64K", "64M", "1G", "1.5M" (binary multiples) to bytes.
uint64_t parse_bytes(const std::string& text);
/// Bytes in the shortest exact K/M/G form: 67108864 -> "64M".
std::string format_bytes(uint64_t bytes);
/// The shortest decimal text that reads back as exactly v: 0.05 -> "0.05"
/// (not Boost's "0.050000000000000003"), 1e-4 -> "1e-4", 300 -> "300".
std::string shortest(double v);
std::string shortest(float v);
/// po::value(v) whose default is *v, shown in --help as written: every
/// floating-point option takes its default this way.
template <class T>
po::typed_value<T>* value_with_default(T* v) {
  return po::value(v)->default_value(*v, shortest(*v));
}
/// "a,b,,c" -> {"a","b","c"}.
std::vector<std::string> split_list(const std::string& text, char sep = ',');

/// Throws a usage error unless value lies in [lo, hi].
template <class T>
void require_range(const char* option, T value, T lo, T hi);

}  // namespace lpsgd::cli

#include "core/error.hpp"

namespace lpsgd::cli {
template <class T>
void require_range(const char* option, T value, T lo, T hi) {
  if (value < lo || value > hi)
    LPSGD_USAGE_ERROR("--" << option << " must be in [" << lo << ", " << hi << "], got "
                           << value);
}
}  // namespace lpsgd::cli
