// MST baseline: binomial-tree (minimum spanning tree) broadcast and reduce;
// allreduce = reduce to chain position 0, then broadcast from it.
// Cost ⌈log₂P⌉(α + nβ) per phase: the whole message crosses every tree level.
#include <memory>

#include "comm/collectives/factory.hpp"
#include "comm/collectives/schedule.hpp"
#include "comm/collectives/tree_util.hpp"
#include "comm/communicator.hpp"

namespace lpsgd::comm {
namespace {

using namespace tree;

/// Binomial broadcast of buf from root: receive from the parent, then send to
/// the children, largest subtree first.
void bcast(Schedule& s, int P, int p, int root, size_t n, Buf buf) {
  const int vr = rel(p, root, P);
  int mask = pow2_ceil(P);
  if (vr != 0) {
    s.recv(abs_rank(vr - lowbit(vr), root, P), whole(buf, n));
    mask = lowbit(vr);
  }
  for (int m = mask / 2; m >= 1; m /= 2)
    if (vr + m < P) s.send(abs_rank(vr + m, root, P), whole(buf, n));
}

/// Binomial reduce into acc (which already holds this rank's contribution):
/// add each child's subtree sum, then pass the result to the parent.
void reduce(Schedule& s, int P, int p, int root, size_t n, Buf acc) {
  const int vr = rel(p, root, P);
  for (int m = 1; m < P; m <<= 1) {
    if (vr & m) {
      s.send(abs_rank(vr - m, root, P), whole(acc, n));
      return;
    }
    if (vr + m < P)
      s.exchange(-1, {}, abs_rank(vr + m, root, P), whole(Buf::ScratchB, n),
                 {{LocalOp::Add, whole(acc, n), whole(acc, n), whole(Buf::ScratchB, n)}});
  }
}

}  // namespace

std::unique_ptr<Collective> make_mst(Communicator& c, const CollArgs& a) {
  const int P = c.size(), p = c.rank();
  const size_t n = a.count;
  const double inv = 1.0 / P;
  Schedule s;
  switch (a.kind) {
    case CollKind::Bcast:
      if (p == a.root) s.local({LocalOp::Copy, whole(Buf::Out, n), whole(Buf::In, n), {}});
      bcast(s, P, p, a.root, n, Buf::Out);
      break;
    case CollKind::Reduce: {
      const Buf acc = p == a.root ? Buf::Out : Buf::ScratchA;
      s.local({LocalOp::Copy, whole(acc, n), whole(Buf::In, n), {}});
      reduce(s, P, p, a.root, n, acc);
      if (p == a.root && a.op == ReduceOp::Avg)
        s.local({LocalOp::Scale, whole(Buf::Out, n), {}, {}, inv});
      break;
    }
    case CollKind::Allreduce:
      s.local({LocalOp::Copy, whole(Buf::Out, n), whole(Buf::In, n), {}});
      reduce(s, P, p, 0, n, Buf::Out);
      if (p == 0 && a.op == ReduceOp::Avg) s.local({LocalOp::Scale, whole(Buf::Out, n), {}, {}, inv});
      bcast(s, P, p, 0, n, Buf::Out);
      break;
  }
  return std::make_unique<ScheduleCollective>(c, a, Algo::Mst, std::move(s));
}

}  // namespace lpsgd::comm
