// BE baselines ("bidirectional exchange", the MPI libraries' large-message
// algorithms):
//   bcast      binomial scatter + ring allgather (van de Geijn)
//   allreduce  Rabenseifner: reduce-scatter by recursive halving, allgather by
//              recursive doubling; ranks beyond the largest power of two first
//              fold their data into a partner and get the result back at the end
//   reduce     the same reduce-scatter, then every segment goes to the root
// Cost ≈ 2 log₂P α + 2n(P−1)/P β: about twice LP's bandwidth term.
#include <memory>
#include <utility>
#include <vector>

#include "comm/collectives/factory.hpp"
#include "comm/collectives/schedule.hpp"
#include "comm/collectives/tree_util.hpp"
#include "comm/communicator.hpp"

namespace lpsgd::comm {
namespace {

using namespace tree;

Region range(Buf b, size_t lo, size_t hi) { return {b, lo, hi - lo}; }

struct Halving {
  int P, pof2, rem;
  explicit Halving(int P_) : P(P_), pof2(pow2_floor(P_)), rem(P_ - pow2_floor(P_)) {}
  /// Rank among the pof2 active ranks, or -1 for a rank that folded out.
  int newrank(int p) const {
    if (p < 2 * rem) return p % 2 == 0 ? -1 : p / 2;
    return p - rem;
  }
  int real(int nr) const { return nr < rem ? 2 * nr + 1 : nr + rem; }
  /// The segment active rank nr holds after the reduce-scatter, and the
  /// (lo, hi) ranges it halved through.
  std::pair<size_t, size_t> final_range(int nr, size_t n,
                                        std::vector<std::pair<size_t, size_t>>* path = nullptr) const {
    size_t lo = 0, hi = n;
    for (int mask = pof2 / 2; mask >= 1; mask /= 2) {
      if (path) path->push_back({lo, hi});
      const size_t mid = lo + (hi - lo) / 2;
      if ((nr & mask) == 0) hi = mid;
      else lo = mid;
    }
    return {lo, hi};
  }
};

/// Reduce-scatter of acc (holding my contribution) over all P ranks; returns
/// my new rank (-1 if I folded out) and, through path, the halving history.
int reduce_scatter(Schedule& s, const Halving& h, int p, size_t n, Buf acc,
                   std::vector<std::pair<size_t, size_t>>& path) {
  if (p < 2 * h.rem) {
    if (p % 2 == 0) {
      s.send(p + 1, whole(acc, n));
      return -1;
    }
    s.exchange(-1, {}, p - 1, whole(Buf::ScratchA, n),
               {{LocalOp::Add, whole(acc, n), whole(acc, n), whole(Buf::ScratchA, n)}});
  }
  const int nr = h.newrank(p);
  size_t lo = 0, hi = n;
  for (int mask = h.pof2 / 2; mask >= 1; mask /= 2) {
    path.push_back({lo, hi});
    const int partner = h.real(nr ^ mask);
    const size_t mid = lo + (hi - lo) / 2;
    const bool low = (nr & mask) == 0;
    const Region keep = low ? range(acc, lo, mid) : range(acc, mid, hi);
    const Region give = low ? range(acc, mid, hi) : range(acc, lo, mid);
    Region in = keep;
    in.buf = Buf::ScratchA;
    s.exchange(partner, give, partner, in, {{LocalOp::Add, keep, keep, in}});
    if (low) hi = mid;
    else lo = mid;
  }
  return nr;
}

/// Allgather by recursive doubling, undoing the halving steps in reverse.
void allgather(Schedule& s, const Halving& h, int nr, size_t n, Buf acc,
               const std::vector<std::pair<size_t, size_t>>& path) {
  auto [lo, hi] = h.final_range(nr, n);
  int level = static_cast<int>(path.size()) - 1;
  for (int mask = 1; mask < h.pof2; mask <<= 1, --level) {
    const auto [plo, phi] = path[static_cast<size_t>(level)];
    const int partner = h.real(nr ^ mask);
    // The partner holds the other half of the parent range.
    const Region theirs = lo == plo ? range(acc, hi, phi) : range(acc, plo, lo);
    s.exchange(partner, range(acc, lo, hi), partner, theirs);
    lo = plo;
    hi = phi;
  }
}

}  // namespace

std::unique_ptr<Collective> make_be(Communicator& c, const CollArgs& a) {
  const int P = c.size(), p = c.rank();
  const size_t n = a.count;
  const double inv = 1.0 / P;
  Schedule s;
  if (a.kind == CollKind::Bcast) {
    const int vr = rel(p, a.root, P);
    const size_t ss = (n + static_cast<size_t>(P) - 1) / static_cast<size_t>(P);
    auto cut = [&](int v) { return std::min(n, static_cast<size_t>(v) * ss); };
    if (p == a.root) s.local({LocalOp::Copy, whole(Buf::Out, n), whole(Buf::In, n), {}});
    // Binomial scatter: each subtree receives the segments of its ranks.
    int mask = pow2_ceil(P);
    if (vr != 0) {
      mask = lowbit(vr);
      s.recv(abs_rank(vr - mask, a.root, P), range(Buf::Out, cut(vr), cut(std::min(vr + mask, P))));
    }
    for (int m = mask / 2; m >= 1; m /= 2)
      if (vr + m < P)
        s.send(abs_rank(vr + m, a.root, P),
               range(Buf::Out, cut(vr + m), cut(std::min(vr + 2 * m, P))));
    // Ring allgather of the P segments.
    auto seg = [&](int v) {
      v = ((v % P) + P) % P;
      return range(Buf::Out, cut(v), cut(v + 1));
    };
    const int right = abs_rank((vr + 1) % P, a.root, P);
    const int left = abs_rank((vr + P - 1) % P, a.root, P);
    for (int t = 0; t + 1 < P; ++t) s.exchange(right, seg(vr - t), left, seg(vr - t - 1));
    return std::make_unique<ScheduleCollective>(c, a, Algo::Be, std::move(s));
  }

  const Halving h(P);
  std::vector<std::pair<size_t, size_t>> path;
  if (a.kind == CollKind::Allreduce) {
    s.local({LocalOp::Copy, whole(Buf::Out, n), whole(Buf::In, n), {}});
    const int nr = reduce_scatter(s, h, p, n, Buf::Out, path);
    if (nr >= 0) allgather(s, h, nr, n, Buf::Out, path);
    if (p < 2 * h.rem) {  // give the folded-out ranks the result
      if (p % 2 == 1) s.send(p - 1, whole(Buf::Out, n));
      else s.recv(p + 1, whole(Buf::Out, n));
    }
    if (a.op == ReduceOp::Avg) s.local({LocalOp::Scale, whole(Buf::Out, n), {}, {}, inv});
  } else {
    const Buf acc = p == a.root ? Buf::Out : Buf::ScratchB;
    s.local({LocalOp::Copy, whole(acc, n), whole(Buf::In, n), {}});
    const int nr = reduce_scatter(s, h, p, n, acc, path);
    // Gather: every active rank sends its finished segment to the root.
    if (p == a.root) {
      Step& st = s.next();
      for (int q = 0; q < h.pof2; ++q) {
        if (h.real(q) == p) continue;
        const auto [lo, hi] = h.final_range(q, n);
        if (hi > lo) st.recvs.push_back({h.real(q), range(Buf::Out, lo, hi)});
      }
      if (a.op == ReduceOp::Avg) s.local({LocalOp::Scale, whole(Buf::Out, n), {}, {}, inv});
    } else if (nr >= 0) {
      const auto [lo, hi] = h.final_range(nr, n);
      s.send(a.root, range(acc, lo, hi));
    }
  }
  return std::make_unique<ScheduleCollective>(c, a, Algo::Be, std::move(s));
}

}  // namespace lpsgd::comm
