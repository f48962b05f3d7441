// lpsgd ckpt: inspect and verify training checkpoints.
//
//   lpsgd ckpt info FILE|DIR [--json]   what a checkpoint holds and whether it is intact;
//                                       for DIR the one `--resume auto` would use
//   lpsgd ckpt verify FILE|DIR          exit 0 when intact, 1 when damaged
//
// Exit codes: 0 valid; 1 damaged (or DIR holds no valid checkpoint), with one
// `lpsgd: error:` line per damaged file; 2 bad usage (missing path, DIR
// without checkpoints). The checks are in lib/io/checkpoint; this file prints.
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "app/commands.hpp"
#include "core/checksum.hpp"
#include "core/cli.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/checkpoint.hpp"

namespace lpsgd::app {

namespace {

namespace po = cli::po;
namespace fs = std::filesystem;

constexpr const char* kCkptUsage =
    "usage: lpsgd ckpt <subcommand> [options]\n"
    "\n"
    "subcommands:\n"
    "  info FILE|DIR [--json]  step, epoch, ranks, model, config and checksum status of a\n"
    "                          checkpoint; for DIR the newest valid one (what --resume auto uses)\n"
    "  verify FILE|DIR         check a checkpoint (DIR: every checkpoint in it); exit 0 when\n"
    "                          intact, 1 when damaged\n"
    "\n"
    "  lpsgd ckpt <subcommand> --help   options of a subcommand";

// Exists, or a usage error; true for a directory.
bool is_dir(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) LPSGD_USAGE_ERROR(path << ": no such checkpoint file or directory");
  return fs::is_directory(st);
}

// A DIR without any checkpoint file is a wrong path rather than damage.
void require_checkpoints(const std::string& dir) {
  if (io::list_checkpoints(dir).empty())
    LPSGD_USAGE_ERROR(dir << ": no checkpoints (ckpt-*.h5) in this directory");
}

void print_error(const std::string& message) {
  if (log::rank() == 0) std::fprintf(stderr, "lpsgd: error: %s\n", message.c_str());
}

std::string damaged_message(const io::CkptInfo& info) {
  return "checkpoint " + info.path + " is damaged: " + info.error;
}

std::string utc_time(double unix_time) {
  if (!std::isfinite(unix_time) || unix_time <= 0) return "unknown";
  const auto t = static_cast<time_t>(unix_time);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string to_json(const io::CkptInfo& info, const std::vector<std::string>& skipped) {
  const io::CkptMeta& m = info.meta;
  std::ostringstream o;
  o << "{\"path\": " << json_string(info.path) << ", \"valid\": " << (info.valid ? "true" : "false")
    << ", \"error\": " << json_string(info.error) << ", \"step\": " << m.step
    << ", \"epoch\": " << m.epoch << ", \"samples\": " << m.samples << ", \"ranks\": " << m.ranks
    << ", \"batch\": " << m.batch << ", \"accumulate\": " << m.accumulate
    << ", \"global_batch\": " << m.batch * m.accumulate * m.ranks << ", \"model\": " << json_string(m.model)
    << ", \"version\": " << json_string(m.version)
    << ", \"checksum\": " << json_string(checksum_hex(info.checksum))
    << ", \"wall_time\": " << json_number(m.wall_time)
    << ", \"written\": " << json_string(utc_time(m.wall_time)) << ", \"lr\": " << json_number(m.lr)
    << ", \"seed\": " << m.seed << ", \"rng_counter\": " << m.rng_counter
    << ", \"loader_epoch\": " << m.loader_epoch << ", \"loader_cursor\": " << m.loader_cursor
    << ", \"tensors\": " << info.tensors << ", \"bytes\": " << info.bytes
    << ", \"precision\": " << json_string(m.precision)
    << ", \"wire\": " << json_string(m.wire) << ", \"algos\": " << json_string(m.algos)
    << ", \"auto_check\": " << json_string(m.auto_check)
    << ", \"optimizer\": " << json_string(m.optimizer) << ", \"optimizer_steps\": " << m.optimizer_steps
    << ", \"config\": " << json_string(m.config) << ", \"skipped\": [";
  for (size_t i = 0; i < skipped.size(); ++i) o << (i ? ", " : "") << json_string(skipped[i]);
  o << "]}\n";
  return o.str();
}

std::string to_text(const io::CkptInfo& info, const std::string& dir,
                    const std::vector<std::string>& skipped) {
  const io::CkptMeta& m = info.meta;
  std::ostringstream o;
  o << "checkpoint: " << info.path;
  if (!dir.empty()) o << " (newest valid checkpoint in " << dir << ")";
  o << "\nstatus: " << (info.valid ? "valid" : "DAMAGED: " + info.error) << "\n";
  for (const std::string& s : skipped) o << "skipped: " << s << "\n";
  o << "step: " << m.step << "\nepoch: " << m.epoch << "\nsamples: " << m.samples
    << "\nranks: " << m.ranks << "\nbatch: " << m.batch << " per rank"
    << (m.accumulate > 1 ? " x " + std::to_string(m.accumulate) + " micro-batches" : std::string())
    << " (global batch " << m.batch * m.accumulate * m.ranks << ")\nmodel: " << m.model
    << "\nversion: " << m.version << "\nwritten: " << utc_time(m.wall_time)
    << "\nlr: " << m.lr << "\nloader: epoch " << m.loader_epoch << ", cursor " << m.loader_cursor
    << "\nrng: seed " << m.seed << ", counter " << m.rng_counter
    << "\nprecision: " << m.precision << "\nwire: " << m.wire
    << "\noptimizer: " << m.optimizer << " (" << m.optimizer_steps << " steps)"
    << "\nalgorithms: " << (m.algos.empty() ? "-" : m.algos) << (m.ranks > 1 ? " (by bucket)" : "")
    << (m.auto_check.empty() ? "" : ", auto check " + m.auto_check.substr(0, m.auto_check.find(':')))
    << "\nchecksum: " << checksum_hex(info.checksum)
    << (info.valid ? " (verified)" : " (as stored)") << "\ntensors: " << info.tensors
    << "\nsize: " << info.bytes << " bytes\nconfig:\n";
  std::istringstream cfg(m.config);
  for (std::string line; std::getline(cfg, line);) o << "  " << line << "\n";
  return o.str();
}

int info(int argc, char** argv) {
  std::string path;
  bool json = false;
  po::options_description desc("lpsgd ckpt info options");
  desc.add_options()
      ("path", po::value(&path)->required()->value_name("FILE|DIR"), "checkpoint file or directory")
      ("json", po::bool_switch(&json), "print one JSON object");
  po::positional_options_description pos;
  pos.add("path", 1);
  po::variables_map vm;
  if (!cli::parse(argc, argv, desc, vm, "usage: lpsgd ckpt info FILE|DIR [--json]", &pos))
    return 0;

  std::string dir, file = path;
  std::vector<std::string> skipped;
  if (is_dir(path)) {
    require_checkpoints(path);
    dir = path;
    file = io::find_resume_checkpoint(dir, &skipped);
    if (file.empty()) {
      for (const std::string& s : skipped) print_error(s);
      print_error(dir + ": no valid checkpoint");
      return 1;
    }
  }
  const io::CkptInfo ci = io::inspect_checkpoint(file);
  if (log::rank() == 0)
    std::cout << (json ? to_json(ci, skipped) : to_text(ci, dir, skipped)) << std::flush;
  if (!ci.valid) {
    print_error(damaged_message(ci));
    return 1;
  }
  return 0;
}

int verify(int argc, char** argv) {
  std::string path;
  po::options_description desc("lpsgd ckpt verify options");
  desc.add_options()(
      "path", po::value(&path)->required()->value_name("FILE|DIR"),
      "checkpoint file, or a directory whose checkpoints are all checked");
  po::positional_options_description pos;
  pos.add("path", 1);
  po::variables_map vm;
  if (!cli::parse(argc, argv, desc, vm, "usage: lpsgd ckpt verify FILE|DIR", &pos)) return 0;

  std::vector<std::string> files{path};
  if (is_dir(path)) {
    require_checkpoints(path);
    files = io::list_checkpoints(path);
  }
  int damaged = 0;
  for (const std::string& f : files) {
    const io::CkptInfo ci = io::inspect_checkpoint(f);
    if (ci.valid) {
      if (log::rank() == 0)
        std::printf("%s: valid (step %lld, checksum %s)\n", f.c_str(),
                    static_cast<long long>(ci.meta.step), checksum_hex(ci.checksum).c_str());
    } else {
      std::fflush(stdout);
      print_error(damaged_message(ci));
      ++damaged;
    }
  }
  std::fflush(stdout);
  return damaged ? 1 : 0;
}

}  // namespace

int run_ckpt(int argc, char** argv) {
  const std::string sub = argc >= 2 ? argv[1] : "";
  if (sub == "info") return info(argc - 1, argv + 1);
  if (sub == "verify") return verify(argc - 1, argv + 1);
  if (sub == "--help" || sub == "-h") {
    if (log::rank() == 0) std::cout << kCkptUsage << "\n";
    return 0;
  }
  if (sub.empty()) {
    if (log::rank() == 0) std::cerr << kCkptUsage << "\n";
    return 2;
  }
  LPSGD_USAGE_ERROR("unknown ckpt subcommand '" << sub << "' (use info or verify)");
}

}  // namespace lpsgd::app
