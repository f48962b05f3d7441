// A timeline of what a process did, in Chrome's trace-event format (the JSON
// that Perfetto and chrome://tracing open, and Horovod's timeline writes):
// complete events ("ph":"X", a name, a start and a duration) and instants
// ("ph":"i") on lanes, the rows a viewer draws.
//
// Recording is off until enable(); then every event is one append under a
// mutex (the training thread and the progress engine both record), a few
// hundred per step at most, kept in memory up to a cap. serialize() turns
// them into JSON objects on a shared clock: the caller passes this process's
// offset from the reference clock (train measures it against rank 0) and its
// rank, which becomes the event's pid, so the files of several processes
// merge into one trace by concatenation.
#pragma once

#include <cstddef>
#include <string>

namespace lpsgd::trace {

/// The rows of a rank's timeline.
enum class Lane : int {
  Step = 0,      ///< the training thread: data, forward, backward, waits, updates
  Exchange = 1,  ///< collectives while they move data (the progress engine)
  Run = 2,       ///< evaluations, checkpoints
};

/// Starts recording (clears what was recorded). At most `max_events` are
/// kept; later ones are counted and dropped.
void enable(size_t max_events = 1u << 21);
bool enabled();

/// A span [t0_s, t1_s] on the now_s() clock. `args` is the inside of a JSON
/// object ("\"bytes\":4096,\"algo\":\"lp\""), or empty.
void complete(Lane lane, const char* category, const std::string& name, double t0_s, double t1_s,
              const std::string& args = "");
/// A moment on the now_s() clock.
void instant(Lane lane, const char* category, const std::string& name, double t_s,
             const std::string& args = "");

/// Records the span from construction to destruction (when enabled).
class Span {
 public:
  Span(Lane lane, const char* category, std::string name);
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  Lane lane_;
  const char* category_;
  std::string name_;
  double t0_ = 0;
  bool on_ = false;
};

/// Events recorded so far (and dropped past the cap).
size_t recorded();
size_t dropped();

/// The recorded events as JSON objects, each followed by ",\n", with
/// "pid":pid, times in microseconds from `origin_s` on the reference clock
/// (a time t of this process is t - offset_s there), and the metadata that
/// names the process "rank <pid>" and its lanes.
std::string serialize(int pid, double offset_s, double origin_s);

/// A JSON string literal of s (quotes and escapes included).
std::string quote(const std::string& s);

}  // namespace lpsgd::trace
