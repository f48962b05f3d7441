// The trace recorder (see trace.hpp).
#include "core/trace.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <vector>

#include "core/timer.hpp"

namespace lpsgd::trace {
namespace {

struct Event {
  Lane lane;
  char phase;  // 'X' or 'i'
  const char* category;
  std::string name, args;
  double t0, t1;
};

std::atomic<bool> g_on{false};
std::mutex g_mutex;
std::vector<Event> g_events;
size_t g_cap = 0, g_dropped = 0;

void add(Event e) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_events.size() >= g_cap) {
    ++g_dropped;
    return;
  }
  g_events.push_back(std::move(e));
}

const char* lane_name(Lane l) {
  switch (l) {
    case Lane::Step: return "step";
    case Lane::Exchange: return "exchange";
    case Lane::Run: return "run";
  }
  return "?";
}

}  // namespace

void enable(size_t max_events) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_events.clear();
  g_events.reserve(std::min<size_t>(max_events, 1u << 16));
  g_cap = max_events;
  g_dropped = 0;
  g_on.store(true);
}

bool enabled() { return g_on.load(std::memory_order_relaxed); }

void complete(Lane lane, const char* category, const std::string& name, double t0_s, double t1_s,
              const std::string& args) {
  if (!enabled()) return;
  add({lane, 'X', category, name, args, t0_s, t1_s});
}

void instant(Lane lane, const char* category, const std::string& name, double t_s,
             const std::string& args) {
  if (!enabled()) return;
  add({lane, 'i', category, name, args, t_s, t_s});
}

Span::Span(Lane lane, const char* category, std::string name)
    : lane_(lane), category_(category), name_(std::move(name)), on_(enabled()) {
  if (on_) t0_ = now_s();
}

Span::~Span() {
  if (on_) complete(lane_, category_, name_, t0_, now_s());
}

size_t recorded() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_events.size();
}

size_t dropped() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_dropped;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string serialize(int pid, double offset_s, double origin_s) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::string out;
  out.reserve(g_events.size() * 160 + 512);
  char buf[160];
  const auto us = [&](double t) { return (t - offset_s - origin_s) * 1e6; };
  std::snprintf(buf, sizeof buf,
                "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":\"rank %d\"}},\n"
                "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":%d}},\n",
                pid, pid, pid, pid);
  out += buf;
  for (const Lane l : {Lane::Step, Lane::Exchange, Lane::Run}) {
    std::snprintf(buf, sizeof buf,
                  "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"%s\"}},\n",
                  pid, static_cast<int>(l), lane_name(l));
    out += buf;
  }
  for (const Event& e : g_events) {
    out += "{\"ph\":\"";
    out += e.phase;
    out += "\",\"cat\":\"";
    out += e.category;
    out += "\",\"name\":";
    out += quote(e.name);
    std::snprintf(buf, sizeof buf, ",\"pid\":%d,\"tid\":%d,\"ts\":%.3f", pid, static_cast<int>(e.lane),
                  us(e.t0));
    out += buf;
    if (e.phase == 'X') {
      std::snprintf(buf, sizeof buf, ",\"dur\":%.3f", (e.t1 - e.t0) * 1e6);
      out += buf;
    } else {
      out += ",\"s\":\"t\"";
    }
    if (!e.args.empty()) {
      out += ",\"args\":{";
      out += e.args;
      out += '}';
    }
    out += "},\n";
  }
  return out;
}

}  // namespace lpsgd::trace
