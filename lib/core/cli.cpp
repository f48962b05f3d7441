#include "core/cli.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/error.hpp"
#include "core/log.hpp"

namespace lpsgd::cli {

namespace {

// Boost.Program_options builds its error messages by replacing placeholders
// such as %value% with the offending text, again and again until none is
// left; text that itself holds a placeholder never ends (found by
// tests/fuzz/fuzz_config). So "%name%" is refused before Boost sees it.
void refuse_placeholders(const std::string& text, const std::string& where) {
  for (size_t open = text.find('%'); open != std::string::npos; open = text.find('%', open + 1)) {
    size_t end = open + 1;
    while (end < text.size() && (std::islower(static_cast<unsigned char>(text[end])) || text[end] == '_'))
      ++end;
    if (end > open + 1 && end < text.size() && text[end] == '%')
      LPSGD_USAGE_ERROR(where << ": '" << text.substr(open, end + 1 - open)
                              << "' is not allowed in options (Boost.Program_options would "
                                 "expand it in its messages)");
  }
}

// The config file's text for Boost, line by line: Windows line ends (CRLF)
// are taken as plain ones; other control characters, which would end up in
// values and messages, and placeholders (above) are refused.
std::istringstream checked_config(std::istream& in, const std::string& file) {
  std::ostringstream out;
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    const std::string where = "config file '" + file + "' line " + std::to_string(++number);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    for (char c : line) {
      const auto u = static_cast<unsigned char>(c);
      if ((u < 0x20 && c != '\t') || u == 0x7f) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", u);
        LPSGD_USAGE_ERROR(where << ": control character " << hex << " (not a text file?)");
      }
    }
    refuse_placeholders(line, where);
    out << line << '\n';
  }
  return std::istringstream(out.str());
}

}  // namespace

bool parse(int argc, char** argv, const po::options_description& desc, po::variables_map& vm,
           const std::string& usage, const po::positional_options_description* positional) {
  po::options_description common("General");
  common.add_options()("help,h", "show this help and exit")(
      "config", po::value<std::string>()->value_name("FILE"),
      "read options from an INI file (name = value); the command line wins");
  po::options_description all;
  all.add(desc).add(common);
  for (int i = 1; i < argc; ++i) refuse_placeholders(argv[i], "command line");
  try {
    po::command_line_parser parser(argc, argv);
    parser.options(all);
    if (positional) parser.positional(*positional);
    po::store(parser.run(), vm);  // stored first, so the command line wins
    if (vm.count("help")) {
      if (log::rank() == 0) std::cout << usage << "\n\n" << all << std::flush;
      return false;
    }
    if (vm.count("config")) {
      const std::string file = vm["config"].as<std::string>();
      std::ifstream in(file);
      if (!in) LPSGD_USAGE_ERROR("cannot open config file '" << file << "'");
      std::istringstream text = checked_config(in, file);
      po::store(po::parse_config_file(text, desc, /*allow_unregistered=*/false), vm);
    }
    po::notify(vm);
  } catch (const po::error& e) {
    LPSGD_USAGE_ERROR(e.what() << " (see '" << argv[0] << " --help')");
  }
  return true;
}

// std::to_chars without a format: the shortest text that reads back exactly,
// fixed or scientific, whichever is shorter (300 -> "300", 1e-10 -> "1e-10");
// its exponent as one writes it ("1e-04" -> "1e-4", "1e+06" -> "1e6").
template <class T>
std::string shortest_text(T v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  const auto e = s.find('e');
  if (e != std::string::npos) {
    std::string exp = s.substr(e + 1);
    const bool neg = !exp.empty() && exp[0] == '-';
    if (!exp.empty() && (exp[0] == '-' || exp[0] == '+')) exp.erase(0, 1);
    exp.erase(0, std::min(exp.find_first_not_of('0'), exp.size() - 1));
    s = s.substr(0, e + 1) + (neg ? "-" : "") + exp;
  }
  return s;
}

std::string shortest(double v) { return shortest_text(v); }
std::string shortest(float v) { return shortest_text(v); }

uint64_t parse_bytes(const std::string& text) {
  if (text.empty()) LPSGD_USAGE_ERROR("empty size");
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    LPSGD_USAGE_ERROR("bad size '" << text << "' (use e.g. 4096, 64K, 16M, 1G)");
  }
  std::string suffix = text.substr(pos);
  double mult = 1;
  if (suffix == "" || suffix == "B") mult = 1;
  else if (suffix == "K" || suffix == "k" || suffix == "KiB") mult = 1024.0;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB") mult = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB") mult = 1024.0 * 1024 * 1024;
  else LPSGD_USAGE_ERROR("bad size suffix in '" << text << "' (use K, M or G)");
  if (!(value >= 0) || !std::isfinite(value))
    LPSGD_USAGE_ERROR("size must be non-negative, got '" << text << "'");
  if (value * mult > 0x1p62)  // llround beyond long long would be meaningless
    LPSGD_USAGE_ERROR("size '" << text << "' is too large");
  return static_cast<uint64_t>(std::llround(value * mult));
}

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"", "K", "M", "G"};
  int u = 0;
  while (u < 3 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++u;
  }
  return std::to_string(bytes) + units[u];
}

std::vector<std::string> split_list(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    if (c == sep) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

}  // namespace lpsgd::cli
