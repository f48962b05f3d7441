#include "comm/calibrate.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <thread>
#include <vector>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"

namespace lpsgd::comm {
namespace {

// Collectives stream large buffers: every block comes from and goes to memory
// that is not in cache. Calibration does the same, walking through this much.
constexpr size_t kStreamBytes = 64u << 20;
// Time one measurement may take where its blocks are slow (a slow network).
constexpr double kStreamBudget = 0.15;
constexpr int kTagCount = 31;  // on the control communicator, between two ranks

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
double stream_period(Communicator& c, const std::vector<Hop>& hops, size_t bytes, int blocks,
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
  std::vector<double> t;
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
    double s = timer.elapsed_s();
    MPI_Request req;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, c.ctrl_comm(), &req));
    wait_result(req, ends.empty());
    if (r > 0) {
      t.push_back(s / static_cast<double>(k));
      spent += s;
    } else {
      const double fit = budget_s / 2 / std::max(1e-12, s / static_cast<double>(k));
      const double lo = static_cast<double>(k), hi = static_cast<double>(blocks);
      k = static_cast<uint64_t>(std::clamp(fit, lo, hi));
    }
  }
  std::nth_element(t.begin(), t.begin() + static_cast<long>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

double stream_period(Communicator& c, int a, size_t bytes, int blocks, int reps,
                     DeviceBuffer& stream) {
  return stream_period(c, {{a, a + 1}}, bytes, blocks, reps, stream);
}

/// Half the median round trip of a small block between chain positions a and
/// a + 1 over the link: the latency a block pays on a hop before a pipeline is
/// full. Streaming (above) hides it behind the blocks in flight — over TCP the
/// socket takes the next block at once, and the fit's α came out as zero
/// there while a hop took tens of microseconds.
double half_round_trip(Communicator& c, int a, size_t bytes, int reps, DeviceBuffer& stream) {
  const int pos = c.rank() - a;
  char* src = static_cast<char*>(stream.data());
  char* dst = src + stream.bytes() / 2;
  std::vector<double> t;
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
    const auto round_trip = [&](uint64_t j) {
      Timer timer;
      if (pos == 0) {
        send(j);
        recv(j);
      } else {
        recv(j);
        send(j);
      }
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
    for (uint64_t j = 5; j < k; ++j) t.push_back(round_trip(j) / 2);
    L->advance(k, k);
  }
  double h = 0;
  if (pos == 0) {
    std::nth_element(t.begin(), t.begin() + static_cast<long>(t.size() / 2), t.end());
    h = t[t.size() / 2];
  }
  MPI_Request req;
  MPI_CHECK(MPI_Ibcast(&h, 1, MPI_DOUBLE, a, c.ctrl_comm(), &req));
  wait_result(req, pos != 0 && pos != 1);
  return h;
}

/// The first chain position after `after` whose right link is of `kind` (the
/// same on every rank), or -1 where the chain has none.
int first_link_of(const Communicator& c, LinkKind kind, int after = -1) {
  int p = c.rank() > after && c.chain().has_right() && c.chain().right_kind() == kind ? c.rank()
                                                                                     : INT_MAX;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &p, 1, MPI_INT, MPI_MIN, c.ctrl_comm()));
  return p == INT_MAX ? -1 : p;
}

/// α and β of the link from position a to a + 1: t(b) = α + b·β per block.
/// `network`: the link crosses a network (an MPI link between nodes).
std::array<double, 2> fit_link(Communicator& c, int a, int reps, DeviceBuffer& stream,
                               bool network = false) {
  // Two block sizes around the ones LP picks.
  const size_t b1 = 16u << 10, b2 = 256u << 10;
  const double t1 = stream_period(c, a, b1, 512, reps, stream);
  const double t2 = stream_period(c, a, b2, 64, reps, stream);
  const double b = std::max(1e-13, (t2 - t1) / static_cast<double>(b2 - b1));
  // The per-block cost streaming shows, as t(b0) - b0·β. Across a slow
  // network t1 is nearly all transfer (16 KiB at 200 Mbit/s: 655 us against
  // ~15 us of overhead), so its intercept is a small difference of two large
  // numbers: on one cluster it came out at 0.12 to 1.4 ms from run to run and
  // made LP's blocks 2-3x too large (10% slower at 8 nodes). There a stream
  // of 1 KiB blocks measures it directly.
  size_t b0 = b1;
  double t0 = t1;
  if (network) {
    b0 = 1u << 10;
    t0 = stream_period(c, a, b0, 512, reps, stream);
  }
  // α: that per-block cost, or the one-way latency of a small block,
  // whichever is larger (the pipeline's fill pays the latter).
  const double al = std::max({1e-8, t0 - b * static_cast<double>(b0),
                              half_round_trip(c, a, 64, 5 * reps, stream)});
  std::array<double, 2> ab = {al, b};
  MPI_CHECK(MPI_Bcast(ab.data(), 2, MPI_DOUBLE, a, c.ctrl_comm()));
  return ab;
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
    const double one = stream_period(c, b, bytes, blocks, reps, stream);
    const double both = stream_period(c, {{a + 1, a}, {b, b + 1}}, bytes, blocks, reps, stream);
    ratio.push_back(both / one);
    LPSGD_DEBUG("calibration: a node's two MPI links, one stream " << one * 1e3
                << " ms per block, both at once " << both * 1e3 << " ms");
  }
  std::sort(ratio.begin(), ratio.end());
  return ratio[1] < 1.4;
}

}  // namespace

bool links_match(Communicator& c, const CostModel& m, double* measured_s, double* predicted_s,
                 LinkKind* kind) {
  const size_t bytes = 256u << 10;
  const int blocks = 8;
  DeviceBuffer stream(c.device(), 2 * bytes * blocks);
  // The MPI links within 1.5x; the peer links within 3x (a node's memory is
  // shared with everything else on it, so its periods vary more), which is
  // enough to catch a calibration made while a peer was descheduled: one
  // measured under load kept α_shm = 4 ms, some 7,000x the real one, and
  // made auto pass over LP on that machine for every job after it.
  for (const auto& [k, tolerance] : {std::pair{LinkKind::Mpi, 1.5}, std::pair{LinkKind::Shm, 3.0}}) {
    const int a = first_link_of(c, k);
    if (a < 0) continue;
    const double measured = stream_period(c, a, bytes, blocks, 1, stream);
    const double predicted = k == LinkKind::Mpi
                                 ? m.alpha_mpi + static_cast<double>(bytes) * m.beta_mpi
                                 : m.alpha_shm + static_cast<double>(bytes) * m.beta_shm;
    if (measured < tolerance * predicted && predicted < tolerance * measured) continue;
    if (measured_s) *measured_s = measured;
    if (predicted_s) *predicted_s = predicted;
    if (kind) *kind = k;
    return false;
  }
  return true;
}

CostModel calibrate(MPI_Comm parent, Device& dev, int ranks_per_node, int reps) {
  reps = std::max(3, reps / 5);  // each repetition streams a whole 8 MiB
  CostModel m;
  int size = 1;
  MPI_CHECK(MPI_Comm_size(parent, &size));
  const size_t big = 1u << 20;
  DeviceBuffer stream(dev, kStreamBytes);
  if (size >= 2) {
    // The chain's own links: its first peer link, and its first MPI link
    // (between nodes: with several ranks per node, ranks 0 and 1 share a node
    // and an MPI link between them would measure the MPI library's shared
    // memory, not the network).
    CommOptions o;
    o.ranks_per_node = ranks_per_node;
    o.slot_bytes = big;
    Communicator c(parent, dev, o);
    const int shm = first_link_of(c, LinkKind::Shm), mpi = first_link_of(c, LinkKind::Mpi);
    if (shm >= 0) {
      const auto ab = fit_link(c, shm, reps, stream);
      m.alpha_shm = ab[0];
      m.beta_shm = ab[1];
    }
    if (mpi >= 0) {
      const auto ab = fit_link(c, mpi, reps, stream, /*network=*/c.chain().hosts().size() >= 2);
      m.alpha_mpi = ab[0];
      m.beta_mpi = ab[1];
      // Whether LP's streams through a node share its NIC: needs a node with
      // MPI links on both sides, on three machines or more (pretend nodes of
      // one machine have no network to ask).
      const int next = first_link_of(c, LinkKind::Mpi, mpi);
      if (next >= 0 && c.chain().hosts().size() >= 3 &&
          c.chain().node_of(mpi + 1) == c.chain().node_of(next))
        m.mpi_neighbour_links = neighbour_links(c, mpi, next, 2, stream);
    } else {
      // One node: MPI links over the MPI library's transport between two of
      // its ranks (what pretend nodes use).
      o.links = LinksMode::Mpi;
      Communicator cm(parent, dev, o);
      const auto ab = fit_link(cm, 0, reps, stream);
      m.alpha_mpi = ab[0];
      m.beta_mpi = ab[1];
    }
  }
  // γ per byte of output, as an LP step reduces: a block just received (in
  // cache) plus this rank's block of a large input, into a large output.
  const size_t n = big / 4;  // floats per block
  DeviceBuffer out(dev, kStreamBytes), part(dev, big);
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    Timer timer;
    for (size_t off = 0; off + big <= kStreamBytes; off += big)
      dev.reduce_add(DType::F32, static_cast<char*>(out.data()) + off, part.data(),
                     static_cast<const char*>(stream.data()) + off, n);
    dev.synchronize();
    t.push_back(timer.elapsed_s());
  }
  std::sort(t.begin(), t.end());
  double g = t[t.size() / 2] / static_cast<double>(kStreamBytes);
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &g, 1, MPI_DOUBLE, MPI_MAX, parent));
  m.gamma = g;
  return m;
}

}  // namespace lpsgd::comm
