#include "comm/calibrate.hpp"

#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdio>
#include <ctime>
#include <sstream>
#include <thread>
#include <vector>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "lpsgd/config.hpp"

namespace lpsgd::comm {
namespace {

// Collectives stream large buffers: every block comes from and goes to memory
// that is not in cache. Calibration does the same, walking through this much.
constexpr size_t kStreamBytes = 64u << 20;
// Time one measurement may take where its blocks are slow (a slow network).
constexpr double kStreamBudget = 0.15;
constexpr int kTagCount = 31;  // on the control communicator, between two ranks

/// The share of the wall time this thread ran on a core (user and system
/// time over elapsed time): a rank that polls, as every measuring rank does,
/// runs all the time unless something else took its core. A repetition in
/// which some measuring rank had less than kCleanShare of its core was made
/// beside other work (another job, a build): its time says more about the
/// scheduler than about the link, and it is set aside. Under SimGrid the
/// simulated ranks are threads of one process and have no cores: always 1.
constexpr double kCleanShare = 0.85;
class CpuShare {
 public:
  CpuShare() : wall_(now_s()), cpu_(thread_cpu_s()) {}
  double share() const {
    if (build::smpi) return 1.0;
    const double wall = now_s() - wall_;
    return wall > 0 ? std::min(1.0, (thread_cpu_s() - cpu_) / wall) : 1.0;
  }

 private:
  static double thread_cpu_s() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  double wall_, cpu_;
};

/// One measured quantity: the median over its clean repetitions (or over all
/// of them where fewer than two were clean) and the least cpu share of the
/// repetitions it comes from.
struct Sample {
  double t = 0;
  double share = 1;
};

Sample summarize(std::vector<double> t, const std::vector<double>& share) {
  std::vector<double> clean, clean_share;
  for (size_t i = 0; i < t.size(); ++i)
    if (share[i] >= kCleanShare) {
      clean.push_back(t[i]);
      clean_share.push_back(share[i]);
    }
  std::vector<double> shares = share;
  if (clean.size() >= 2) {
    t = clean;
    shares = clean_share;
  }
  std::nth_element(t.begin(), t.begin() + static_cast<long>(t.size() / 2), t.end());
  Sample s;
  s.t = t[t.size() / 2];
  s.share = clean.size() >= 2 ? *std::min_element(shares.begin(), shares.end())
                              : (std::nth_element(shares.begin(), shares.begin() + static_cast<long>(shares.size() / 2),
                                                  shares.end()),
                                 shares[shares.size() / 2]);
  return s;
}

/// Completes a nonblocking collective; `idle`: sleeping between tests. The
/// ranks that take no part in a measurement wait for its result that way: in
/// a blocking call MPI would poll, and where ranks outnumber cores (several
/// nodes emulated on one machine) that polling took the measuring ranks'
/// cores and made a network hop's latency come out 15 us to 0.9 ms from one
/// calibration to the next. The measuring ranks wait as before.
void wait_result(MPI_Request& req, bool idle) {
  if (!idle) {
    MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    return;
  }
  for (int done = 0;;) {
    MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

/// One stream of a calibration: chain position `from` sends to the adjacent
/// position `to` (either side).
struct Hop {
  int from, to;
};

/// Median time per block while each hop streams `blocks` blocks of `bytes` at
/// once, through its link with its W slots, as one hop of an LP pipeline does:
/// the sender takes each block from a large buffer, the receiver writes it to
/// another part of that buffer (MPI links deliver there; peer links are read in
/// place and copied out). The per-block period of a real pipeline includes
/// what a ping-pong hides: flag and slot traffic between the cores, and the
/// receiver's copy. A first untimed pass walks the first part so that memory
/// registrations are warm; repetitions walk the buffer so that caches do not
/// hold it. A rank may serve several hops (one link each); it drives them all.
///
/// On a slow network the blocks cost more than a calibration may take (a few
/// hundred ms in all, since training calibrates on first use): the untimed
/// pass streams at most 8 blocks, and from its time the timed passes take as
/// many blocks as fit in half of `budget_s` (at least 8, at most `blocks`)
/// and stop after `budget_s` once two are in. On fast links `blocks` and
/// `reps` decide, as before. Every rank decides from the slowest rank's
/// times, so all take the same number of passes.
Sample stream_period(Communicator& c, const std::vector<Hop>& hops, size_t bytes, int blocks,
                     int reps, DeviceBuffer& stream, double budget_s = kStreamBudget) {
  const size_t half = stream.bytes() / 2;
  LPSGD_CHECK(bytes * static_cast<size_t>(blocks) <= half,
              "calibration stream of " << blocks << " x " << bytes << " bytes exceeds " << half);
  const size_t span = bytes * static_cast<size_t>(blocks);
  const size_t places = std::max<size_t>(1, half / span);
  uint64_t k = std::min<uint64_t>(static_cast<uint64_t>(blocks), 8);
  // This rank's ends of the hops: the link, and which way it moves data.
  struct End {
    Link* link;
    bool sends;
    uint64_t base = 0, posted = 0, done = 0;
  };
  std::vector<End> ends;
  for (const Hop& h : hops) {
    const bool right = h.to == h.from + 1;
    if (c.rank() == h.from) ends.push_back({right ? c.right_link() : c.left_link(), true});
    if (c.rank() == h.to) ends.push_back({right ? c.left_link() : c.right_link(), false});
  }
  std::vector<double> t, share;
  double spent = 0;
  for (int r = 0; r < reps + 1 && !(t.size() >= 2 && spent > budget_s); ++r) {
    // Each repetition takes the next part of the buffer, as a large message would.
    char* src = static_cast<char*>(stream.data()) + (static_cast<size_t>(r) % places) * span;
    char* dst = src + half;
    for (End& e : ends) {
      e.base = e.sends ? e.link->tx_base() : e.link->rx_base();
      e.posted = e.done = 0;
    }
    MPI_CHECK(MPI_Barrier(c.ctrl_comm()));
    Timer timer;
    const CpuShare cpu;
    for (size_t busy = ends.size(); busy > 0;) {
      busy = 0;
      for (End& e : ends) {
        Link* L = e.link;
        if (e.sends) {
          for (; e.posted < k && L->can_send(e.base + e.posted); ++e.posted)
            L->post_send(e.base + e.posted, src + e.posted * bytes, bytes);
          for (; e.done < e.posted && L->send_done(e.base + e.done); ++e.done) {}
        } else {
          for (; e.posted < k && L->can_recv(e.base + e.posted); ++e.posted)
            L->post_recv(e.base + e.posted, bytes, dst + e.posted * bytes);
          for (const void* d; e.done < e.posted && (d = L->test_recv(e.base + e.done)); ++e.done) {
            if (d != dst + e.done * bytes) c.device().copy(dst + e.done * bytes, d, bytes);
            L->release_recv(e.base + e.done);
          }
        }
        if (e.done < k) ++busy;
      }
    }
    for (End& e : ends) e.sends ? e.link->advance(k, 0) : e.link->advance(0, k);
    // The slowest rank's time, and the least share of a core that a rank
    // moving data had (the others wait asleep and count as 1): one MAX.
    double ts[2] = {timer.elapsed_s(), ends.empty() ? -1.0 : -cpu.share()};
    MPI_Request req;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, ts, 2, MPI_DOUBLE, MPI_MAX, c.ctrl_comm(), &req));
    wait_result(req, ends.empty());
    const double s = ts[0];
    if (r > 0) {
      t.push_back(s / static_cast<double>(k));
      share.push_back(-ts[1]);
      spent += s;
    } else {
      const double fit = budget_s / 2 / std::max(1e-12, s / static_cast<double>(k));
      const double lo = static_cast<double>(k), hi = static_cast<double>(blocks);
      k = static_cast<uint64_t>(std::clamp(fit, lo, hi));
    }
  }
  return summarize(t, share);
}

Sample stream_period(Communicator& c, int a, size_t bytes, int blocks, int reps,
                     DeviceBuffer& stream) {
  return stream_period(c, {{a, a + 1}}, bytes, blocks, reps, stream);
}

/// Half the median round trip of a small block between chain positions a and
/// a + 1 over the link: the latency a block pays on a hop before a pipeline is
/// full. Streaming (above) hides it behind the blocks in flight — over TCP the
/// socket takes the next block at once, and the fit's α came out as zero
/// there while a hop took tens of microseconds.
Sample half_round_trip(Communicator& c, int a, size_t bytes, int reps, DeviceBuffer& stream) {
  const int pos = c.rank() - a;
  char* src = static_cast<char*>(stream.data());
  char* dst = src + stream.bytes() / 2;
  std::vector<double> t, share;
  if (pos == 0 || pos == 1) {
    Link* L = pos == 0 ? c.right_link() : c.left_link();
    const uint64_t tx = L->tx_base(), rx = L->rx_base();
    const auto send = [&](uint64_t j) {
      while (!L->can_send(tx + j)) {}
      L->post_send(tx + j, src, bytes);
      while (!L->send_done(tx + j)) {}
    };
    const auto recv = [&](uint64_t j) {
      while (!L->can_recv(rx + j)) {}
      L->post_recv(rx + j, bytes, dst);
      while (!L->test_recv(rx + j)) {}
      L->release_recv(rx + j);
    };
    double last_share = 1;
    const auto round_trip = [&](uint64_t j) {
      Timer timer;
      const CpuShare cpu;
      if (pos == 0) {
        send(j);
        recv(j);
      } else {
        recv(j);
        send(j);
      }
      last_share = cpu.share();
      return timer.elapsed_s();
    };
    // 5 untimed first; then as many as fit in kStreamBudget (at least 5, at
    // most reps), counted by the first rank from the untimed ones and sent to
    // the second, so both make the same number.
    double warm = 0;
    for (uint64_t j = 0; j < 5; ++j) warm += round_trip(j);
    const int fit = static_cast<int>(kStreamBudget / std::max(1e-9, warm / 5));
    int timed = std::clamp(fit, 5, std::max(5, reps));
    if (pos == 0) MPI_CHECK(MPI_Send(&timed, 1, MPI_INT, a + 1, kTagCount, c.ctrl_comm()));
    else MPI_CHECK(MPI_Recv(&timed, 1, MPI_INT, a, kTagCount, c.ctrl_comm(), MPI_STATUS_IGNORE));
    const uint64_t k = 5 + static_cast<uint64_t>(timed);
    for (uint64_t j = 5; j < k; ++j) {
      t.push_back(round_trip(j) / 2);
      share.push_back(last_share);
    }
    L->advance(k, k);
  }
  // Rank a's median and share (the round trips are its own); every rank
  // learns them.
  double h[2] = {0, 1};
  if (pos == 0) {
    const Sample s = summarize(t, share);
    h[0] = s.t;
    h[1] = s.share;
  }
  MPI_Request req;
  MPI_CHECK(MPI_Ibcast(h, 2, MPI_DOUBLE, a, c.ctrl_comm(), &req));
  wait_result(req, pos != 0 && pos != 1);
  return {h[0], h[1]};
}

/// The first chain position after `after` whose right link is of `kind` (the
/// same on every rank), or -1 where the chain has none.
int first_link_of(const Communicator& c, LinkKind kind, int after = -1) {
  int p = c.rank() > after && c.chain().has_right() && c.chain().right_kind() == kind ? c.rank()
                                                                                     : INT_MAX;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &p, 1, MPI_INT, MPI_MIN, c.ctrl_comm()));
  return p == INT_MAX ? -1 : p;
}

/// α and β of the link from position a to a + 1 (t(b) = α + b·β per block),
/// and the least cpu share of the measurements they come from.
struct Fit {
  double alpha = 0, beta = 0, share = 1;
};

/// `network`: the link crosses a network (an MPI link between nodes). Every
/// rank returns the same fit: the periods are agreed, the round trip is rank
/// a's, sent to all.
Fit fit_link(Communicator& c, int a, int reps, DeviceBuffer& stream, bool network = false) {
  // Two block sizes around the ones LP picks.
  const size_t b1 = 16u << 10, b2 = 256u << 10;
  const Sample t1 = stream_period(c, a, b1, 512, reps, stream);
  const Sample t2 = stream_period(c, a, b2, 64, reps, stream);
  const double b = std::max(1e-13, (t2.t - t1.t) / static_cast<double>(b2 - b1));
  // The per-block cost streaming shows, as t(b0) - b0·β. Across a slow
  // network t1 is nearly all transfer (16 KiB at 200 Mbit/s: 655 us against
  // ~15 us of overhead), so its intercept is a small difference of two large
  // numbers: on one cluster it came out at 0.12 to 1.4 ms from run to run and
  // made LP's blocks 2-3x too large (10% slower at 8 nodes). There a stream
  // of 1 KiB blocks measures it directly.
  size_t b0 = b1;
  Sample t0 = t1;
  if (network) {
    b0 = 1u << 10;
    t0 = stream_period(c, a, b0, 512, reps, stream);
  }
  const Sample rtt = half_round_trip(c, a, 64, 5 * reps, stream);
  // α: that per-block cost, or the one-way latency of a small block,
  // whichever is larger (the pipeline's fill pays the latter).
  Fit f;
  f.alpha = std::max({1e-8, t0.t - b * static_cast<double>(b0), rtt.t});
  f.beta = b;
  f.share = std::min({t1.share, t2.share, t0.share, rtt.share});
  return f;
}

/// Whether a node's MPI links to its two chain neighbours are links of their
/// own (a ring or chain of point-to-point links: CostModel::
/// mpi_neighbour_links) rather than one NIC into a switch. `a` and `b` are
/// the MPI links on either side of one node (positions a + 1 ... b on it): it
/// streams out of that node over b alone, then over both at once (to a and to
/// b + 1). Through one NIC the two streams share its rate and each block takes
/// about twice as long; over links of their own, about as long as one.
bool neighbour_links(Communicator& c, int a, int b, int reps, DeviceBuffer& stream) {
  // The median of three ratios, each of the two measured back to back: a
  // node's other work (or another job's) slows one measurement now and then.
  const size_t bytes = 256u << 10;
  const int blocks = 16;
  std::vector<double> ratio;
  for (int i = 0; i < 3; ++i) {
    const double one = stream_period(c, b, bytes, blocks, reps, stream).t;
    const double both = stream_period(c, {{a + 1, a}, {b, b + 1}}, bytes, blocks, reps, stream).t;
    ratio.push_back(both / one);
    LPSGD_DEBUG("calibration: a node's two MPI links, one stream " << one * 1e3
                << " ms per block, both at once " << both * 1e3 << " ms");
  }
  std::sort(ratio.begin(), ratio.end());
  return ratio[1] < 1.4;
}

/// γ per byte of output, as an LP step reduces: a block just received (in
/// cache) plus this rank's block of a large input, into a large output. Every
/// rank at once (the node's ranks share its memory, as in a collective); the
/// slowest rank's median of three passes, and the least cpu share.
Sample reduce_period(Device& dev, MPI_Comm parent, DeviceBuffer& stream, DeviceBuffer& out,
                     DeviceBuffer& part) {
  const size_t big = part.bytes(), n = big / 4;  // floats per block
  std::vector<double> t, share;
  for (int r = 0; r < 3; ++r) {
    Timer timer;
    const CpuShare cpu;
    for (size_t off = 0; off + big <= kStreamBytes; off += big)
      dev.reduce_add(DType::F32, static_cast<char*>(out.data()) + off, part.data(),
                     static_cast<const char*>(stream.data()) + off, n);
    dev.synchronize();
    t.push_back(timer.elapsed_s() / static_cast<double>(kStreamBytes));
    share.push_back(cpu.share());
  }
  const Sample mine = summarize(t, share);
  double g[2] = {mine.t, -mine.share};
  MPI_Request req;
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, g, 2, MPI_DOUBLE, MPI_MAX, parent, &req));
  wait_result(req, false);
  return {g[0], -g[1]};
}

/// One round of a calibration: every link kind the chain has, then γ.
struct Round {
  bool has_shm = false, has_mpi = false;
  Fit shm, mpi;
  Sample gamma;
  double share() const {
    return std::min({has_shm ? shm.share : 1.0, has_mpi ? mpi.share : 1.0, gamma.share});
  }
};

// A calibration is High when kRounds of its rounds were clean and agree
// within kSpread (the largest max/min of a β or γ over them). It measures at
// most kMaxRounds rounds, and stops after kBusyRounds where none was clean:
// the node is busy, and more rounds would not make it less so.
constexpr int kRounds = 3, kMaxRounds = 6, kBusyRounds = 3;
constexpr double kSpread = 1.5;
// A peer link's copy (β_shm / 2: its stream copies each block into a slot
// and out again, two copies at once) slower than this times the MPI link's
// between the same two processes (one copy, by the library's shared memory)
// contradicts what both are: copies through the same memory.
constexpr double kPeerSlack = 1.5;

/// printf into a string, for the notes.
template <class... A>
std::string format(const char* fmt, A... a) {
  char buf[160];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  std::snprintf(buf, sizeof buf, fmt, a...);
#pragma GCC diagnostic pop
  return buf;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

}  // namespace

LinkCheck check_links(Communicator& c, const CostModel& m) {
  const size_t bytes = 256u << 10;
  const int blocks = 8;
  DeviceBuffer stream(c.device(), 2 * bytes * blocks);
  LinkCheck out;
  // The MPI links within 1.5x; the peer links within 3x (a node's memory is
  // shared with everything else on it, so its periods vary more), which is
  // enough to catch a calibration made while a peer was descheduled: one
  // measured under load kept α_shm = 4 ms, some 7,000x the real one, and
  // made auto pass over LP on that machine for every job after it. Each is
  // the median of five streams; one made without a core to itself cannot
  // say that a link got slower (the node is busy: LinkCheck::Busy), only
  // that it is faster than the calibration says.
  for (const auto& [k, tolerance] : {std::pair{LinkKind::Mpi, 1.5}, std::pair{LinkKind::Shm, 3.0}}) {
    const int a = first_link_of(c, k);
    if (a < 0) continue;
    const Sample s = stream_period(c, a, bytes, blocks, 5, stream);
    const double predicted = k == LinkKind::Mpi
                                 ? m.alpha_mpi + static_cast<double>(bytes) * m.beta_mpi
                                 : m.alpha_shm + static_cast<double>(bytes) * m.beta_shm;
    // Faster than predicted is wrong however busy the node is: load only
    // ever slows a link down.
    if (tolerance * s.t < predicted) return {LinkCheck::Differs, k, s.t, predicted, s.share};
    if (s.share < kCleanShare) {
      if (out.result == LinkCheck::Fits) out = {LinkCheck::Busy, k, s.t, predicted, s.share};
      continue;
    }
    if (s.t < tolerance * predicted) continue;
    return {LinkCheck::Differs, k, s.t, predicted, s.share};
  }
  return out;
}

bool prefer_fresh(const CostModel& old, const CostModel& fresh, std::string* why) {
  using C = CostModel::Confidence;
  const auto say = [&](const std::string& s) {
    if (why) *why = s;
  };
  if (!old.calibrated) {
    say("there was none");
    return true;
  }
  if (fresh.quality.confidence == C::High) {
    say("the new measurement is consistent");
    return true;
  }
  if (old.quality.confidence == C::High) {
    say("the new measurement is not (" + fresh.quality.note + ") and the one before was");
    return false;
  }
  // Neither is sure: the one whose ranks had more of their cores is nearer
  // to what the links do when the node is quiet.
  if (fresh.quality.cpu_share >= old.quality.cpu_share) {
    say(format("neither is sure, and the new one had more of the cores (cpu share %.2f against %.2f)",
               fresh.quality.cpu_share, old.quality.cpu_share));
    return true;
  }
  say(format("neither is sure, and the one before had more of the cores (cpu share %.2f against %.2f)",
             old.quality.cpu_share, fresh.quality.cpu_share));
  return false;
}

CostModel calibrate(MPI_Comm parent, Device& dev, int ranks_per_node, int reps, int window,
                    size_t mpi_message) {
  reps = std::max(3, reps / 10);  // each repetition streams a whole 8 MiB; rounds repeat it all
  CostModel m;
  int size = 1;
  MPI_CHECK(MPI_Comm_size(parent, &size));
  const size_t big = 1u << 20;
  DeviceBuffer stream(dev, kStreamBytes), out(dev, kStreamBytes), part(dev, big);
  CommOptions o;
  o.ranks_per_node = ranks_per_node;
  o.slot_bytes = big;
  o.window = window;
  o.mpi_message_bytes = mpi_message;
  // The chain's own links: its first peer link, and its first MPI link
  // (between nodes: with several ranks per node, ranks 0 and 1 share a node
  // and an MPI link between them would measure the MPI library's shared
  // memory, not the network). One node: MPI links over the MPI library's
  // transport between two of its ranks (what pretend nodes use).
  std::unique_ptr<Communicator> c, cm;
  int shm = -1, mpi = -1, nodes = 1;
  bool network = false;
  if (size >= 2) {
    c = std::make_unique<Communicator>(parent, dev, o);
    shm = first_link_of(*c, LinkKind::Shm);
    mpi = first_link_of(*c, LinkKind::Mpi);
    nodes = static_cast<int>(c->chain().hosts().size());
    network = nodes >= 2;
    if (mpi < 0) {
      o.links = LinksMode::Mpi;
      cm = std::make_unique<Communicator>(parent, dev, o);
    }
  }
  // Rounds of every measurement, one after another, so that a burst of other
  // work slows one round rather than every measurement of one link kind.
  std::vector<Round> rounds;
  int clean = 0;
  while (clean < kRounds && static_cast<int>(rounds.size()) < kMaxRounds &&
         !(clean == 0 && static_cast<int>(rounds.size()) >= kBusyRounds)) {
    Round r;
    if (shm >= 0) {
      r.has_shm = true;
      r.shm = fit_link(*c, shm, reps, stream);
    }
    if (mpi >= 0) {
      r.has_mpi = true;
      r.mpi = fit_link(*c, mpi, reps, stream, network);
    } else if (cm) {
      r.has_mpi = true;
      r.mpi = fit_link(*cm, 0, reps, stream);
    }
    r.gamma = reduce_period(dev, parent, stream, out, part);
    if (r.share() >= kCleanShare) ++clean;
    rounds.push_back(r);
    LPSGD_DEBUG("calibration round " << rounds.size() << ": beta_shm " << r.shm.beta << " beta_mpi "
                                     << r.mpi.beta << " gamma " << r.gamma.t << ", cpu share "
                                     << r.share());
  }
  // The rounds that had their cores (all of them where fewer than two did),
  // each number their median: a β is the difference of two periods over the
  // difference of two sizes, so noise moves it either way (under load one
  // round's fit came out at the floor of 1e-13 s/B), and neither the least
  // nor the largest of the rounds is safe.
  std::vector<Round> use;
  for (const Round& r : rounds)
    if (r.share() >= kCleanShare) use.push_back(r);
  if (use.size() < 2) use = rounds;
  const auto median = [&](auto get) {
    std::vector<double> v;
    for (const Round& r : use) v.push_back(get(r));
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  const auto least = [&](auto get) {
    double v = get(use[0]);
    for (const Round& r : use) v = std::min(v, get(r));
    return v;
  };
  const auto spread = [&](auto get) {
    double lo = get(use[0]), hi = lo;
    for (const Round& r : use) {
      lo = std::min(lo, get(r));
      hi = std::max(hi, get(r));
    }
    return lo > 0 ? hi / lo : 1.0;
  };
  double worst = spread([](const Round& r) { return r.gamma.t; });
  const char* worst_of = "gamma";
  if (shm >= 0) {
    m.alpha_shm = median([](const Round& r) { return r.shm.alpha; });
    m.beta_shm = median([](const Round& r) { return r.shm.beta; });
    if (const double s = spread([](const Round& r) { return r.shm.beta; }); s > worst) {
      worst = s;
      worst_of = "beta_shm";
    }
  }
  if (!rounds.empty() && rounds[0].has_mpi) {
    m.alpha_mpi = median([](const Round& r) { return r.mpi.alpha; });
    m.beta_mpi = median([](const Round& r) { return r.mpi.beta; });
    if (const double s = spread([](const Round& r) { return r.mpi.beta; }); s > worst) {
      worst = s;
      worst_of = "beta_mpi";
    }
  }
  m.gamma = median([](const Round& r) { return r.gamma.t; });
  // Whether LP's streams through a node share its NIC: needs a node with
  // MPI links on both sides, on three machines or more (pretend nodes of
  // one machine have no network to ask).
  if (mpi >= 0) {
    const int next = first_link_of(*c, LinkKind::Mpi, mpi);
    if (next >= 0 && nodes >= 3 && c->chain().node_of(mpi + 1) == c->chain().node_of(next))
      m.mpi_neighbour_links = neighbour_links(*c, mpi, next, 2, stream);
  }

  // What the numbers say of themselves.
  CostModel::Quality& q = m.quality;
  q.rounds = static_cast<int>(use.size());
  q.cpu_share = least([](const Round& r) { return r.share(); });
  q.spread = worst;
  std::vector<std::string> doubts;
  if (clean < kRounds)
    doubts.push_back(format("beside other work: %.0f of %.0f rounds had less than 0.85 of a core",
                            static_cast<double>(rounds.size()) - clean, static_cast<double>(rounds.size())) +
                     format(" (cpu share %.2f)", q.cpu_share));
  if (worst > kSpread)
    doubts.push_back(std::string("its rounds disagree by ") + format("%.2fx", worst) + " (" + worst_of + ")");
  // Between the same two processes of one node the peer link's copy should
  // not be slower than the MPI library's: where it is in rounds that had
  // their cores, it is how this machine is, and the file says so.
  if (shm >= 0 && cm && m.beta_shm / 2 > kPeerSlack * m.beta_mpi) {
    const std::string what = format("a peer link's copy (%.3g s/B) is slower than an MPI link's (%.3g s/B)",
                                    m.beta_shm / 2, m.beta_mpi);
    if (doubts.empty()) q.note = what + ", in rounds that had their cores: how this machine is";
    else doubts.push_back(what);
  }
  q.confidence = doubts.empty() ? CostModel::Confidence::High : CostModel::Confidence::Low;
  for (const std::string& d : doubts) q.note += (q.note.empty() ? "" : "; ") + d;
  q.measured = utc_now() + ", " + std::to_string(size) + " rank" + (size == 1 ? "" : "s") + " on " +
               std::to_string(nodes) + " node" + (nodes == 1 ? "" : "s");
  m.measured_with = CostModel::settings_now(window, mpi_message);
  return m;
}

}  // namespace lpsgd::comm
