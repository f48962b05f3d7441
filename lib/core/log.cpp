#include "core/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace lpsgd::log {
namespace {
std::atomic<int> g_rank{0};
std::atomic<int> g_size{1};
// LPSGD_LOG_LEVEL=debug|info|warn|error sets the starting level (info); an
// unknown name is ignored here (logging must not throw before main).
std::atomic<Level> g_level{[] {
  const char* v = std::getenv("LPSGD_LOG_LEVEL");
  const std::string s = v ? v : "";
  if (s == "debug") return Level::Debug;
  if (s == "warn" || s == "warning") return Level::Warn;
  if (s == "error") return Level::Error;
  return Level::Info;
}()};
std::atomic<bool> g_all{[] {
  const char* v = std::getenv("LPSGD_LOG_ALL_RANKS");
  return v && *v && *v != '0';
}()};
std::mutex g_mutex;

const char* level_tag(Level l) {
  switch (l) {
    case Level::Debug: return "debug: ";
    case Level::Warn: return "warning: ";
    case Level::Error: return "error: ";
    default: return "";
  }
}
}  // namespace

void init(int r, int s) {
  g_rank = r;
  g_size = s;
}
void set_level(Level level) { g_level = level; }
void set_all_ranks(bool all) { g_all = all; }
int rank() { return g_rank; }
int size() { return g_size; }

Level parse_level(const std::string& name) {
  if (name == "debug") return Level::Debug;
  if (name == "info") return Level::Info;
  if (name == "warn" || name == "warning") return Level::Warn;
  if (name == "error") return Level::Error;
  LPSGD_USAGE_ERROR("unknown log level '" << name << "' (use debug, info, warn or error)");
}

bool enabled(Level level) {
  if (level < g_level.load()) return false;
  return level >= Level::Warn || g_all.load() || g_rank.load() == 0;
}

void write(Level level, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_size.load() > 1 && (g_all.load() || g_rank.load() != 0))
    std::fprintf(stderr, "lpsgd [rank %d/%d] %s%s\n", g_rank.load(), g_size.load(),
                 level_tag(level), message.c_str());
  else
    std::fprintf(stderr, "lpsgd: %s%s\n", level_tag(level), message.c_str());
  std::fflush(stderr);
}

}  // namespace lpsgd::log
