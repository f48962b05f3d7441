// Ring allreduce baseline: reduce-scatter then allgather around the chain
// closed into a ring, one of P segments per round.
// Cost 2(P−1)(α + nβ/P): bandwidth-optimal, latency linear in P.
#include <memory>

#include "comm/collectives/factory.hpp"
#include "comm/collectives/schedule.hpp"
#include "comm/communicator.hpp"

namespace lpsgd::comm {

std::unique_ptr<Collective> make_ring(Communicator& c, const CollArgs& a) {
  const int P = c.size(), p = c.rank();
  const size_t n = a.count;
  auto seg = [&](Buf b, int s) {
    s = ((s % P) + P) % P;
    const size_t lo = n * static_cast<size_t>(s) / static_cast<size_t>(P);
    const size_t hi = n * static_cast<size_t>(s + 1) / static_cast<size_t>(P);
    return Region{b, lo, hi - lo};
  };
  const int right = (p + 1) % P, left = (p + P - 1) % P;
  Schedule s;
  s.local({LocalOp::Copy, whole(Buf::Out, n), whole(Buf::In, n), {}});
  // Reduce-scatter: in round t pass segment p−t on and add segment p−t−1 from
  // the left; after P−1 rounds segment p+1 holds the full sum here.
  for (int t = 0; t + 1 < P; ++t) {
    const Region mine = seg(Buf::Out, p - t - 1);
    s.exchange(right, seg(Buf::Out, p - t), left, seg(Buf::ScratchA, p - t - 1),
               {{LocalOp::Add, mine, mine, seg(Buf::ScratchA, p - t - 1)}});
  }
  // Allgather: pass the finished segments around.
  for (int t = 0; t + 1 < P; ++t)
    s.exchange(right, seg(Buf::Out, p + 1 - t), left, seg(Buf::Out, p - t));
  if (a.op == ReduceOp::Avg) s.local({LocalOp::Scale, whole(Buf::Out, n), {}, {}, 1.0 / P});
  return std::make_unique<ScheduleCollective>(c, a, Algo::Ring, std::move(s));
}

}  // namespace lpsgd::comm
