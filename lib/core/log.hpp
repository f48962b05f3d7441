// Rank-aware logging to stderr. By default only rank 0 speaks at info level and
// below; warnings and errors come from any rank. Lines carry a "[rank r/P]"
// prefix when the job has more than one rank and all ranks are logging.
#pragma once

#include <string>

#include "core/error.hpp"

namespace lpsgd::log {

enum class Level { Debug = 0, Info = 1, Warn = 2, Error = 3 };

/// Sets the rank and size used for the prefix and the rank-0 filter.
void init(int rank, int size);
void set_level(Level level);
/// Level from a name: debug, info, warn, error (throws on anything else).
Level parse_level(const std::string& name);
/// When true every rank logs at every level (LPSGD_LOG_ALL_RANKS=1 does the same).
void set_all_ranks(bool all);
bool enabled(Level level);
void write(Level level, const std::string& message);
int rank();
int size();

}  // namespace lpsgd::log

#define LPSGD_LOG_AT(level, msg_expr)                                                    \
  do {                                                                                   \
    if (::lpsgd::log::enabled(level))                                                    \
      ::lpsgd::log::write(level, (::lpsgd::detail::MessageBuilder() << msg_expr).str()); \
  } while (0)
#define LPSGD_DEBUG(msg_expr) LPSGD_LOG_AT(::lpsgd::log::Level::Debug, msg_expr)
#define LPSGD_INFO(msg_expr) LPSGD_LOG_AT(::lpsgd::log::Level::Info, msg_expr)
#define LPSGD_WARN(msg_expr) LPSGD_LOG_AT(::lpsgd::log::Level::Warn, msg_expr)
