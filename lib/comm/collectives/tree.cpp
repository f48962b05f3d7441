// Pipelined double binary tree (--algo tree): broadcast, reduce and allreduce
// whose pipeline fill grows with log P instead of P.
//
// The message is split in two halves, one per tree; each half is cut into
// blocks of b bytes that stream through its tree, every link busy at once:
//   bcast     the root feeds both trees' roots; every rank receives a block
//             from its parent into its output and forwards it to its children.
//   reduce    blocks flow up: a rank adds its children's partial sums to its
//             own block and passes the result to its parent; the root adds
//             the two trees' results to its own input.
//   allreduce each tree's root turns every reduced block straight around and
//             broadcasts it back down the same tree.
// The two trees are complementary (tree_util.hpp, dbt_node): a rank is inner
// in at most one of them and a leaf in the other, so a broadcast rank sends
// and receives about n bytes (n/2 to each of two children in one tree) — the
// depth of a binary tree with the bandwidth of the chain — and an allreduce
// rank about 2n. The trees are over ranks other than the root for bcast and
// reduce (root + 1 ... root − 1 in chain order) and over all ranks for
// allreduce.
//
// Sum order, fixed by the tree's shape: partial = (lower child + mine) +
// upper child, so every run gives the same bits, and in an allreduce every
// rank receives the one result its tree's root computed.
//
// Each tree edge is an MPI link of its own (Communicator::tree_link), with W
// blocks in flight per direction like the chain's links; block numbers go on
// from the link's previous collective.
#include <algorithm>
#include <array>
#include <memory>
#include <sstream>

#include "comm/collectives/factory.hpp"
#include "comm/collectives/tree_util.hpp"
#include "comm/communicator.hpp"
#include "core/error.hpp"

namespace lpsgd::comm {
namespace {

class TreeCollective final : public Collective {
 public:
  TreeCollective(Communicator& c, const CollArgs& a, size_t block_bytes)
      : Collective(c, a, Algo::Tree, block_bytes), dev_(c.device()), esize_(dtype_size(a.dtype)) {
    elems_ = elems_per_block(Algo::Tree, block_bytes, a.dtype);
    P_ = c.size();
    pos_ = c.rank();
    in_ = static_cast<const char*>(a.in ? a.in : a.out);
    out_ = static_cast<char*>(a.out);
    reduce_ = a.kind != CollKind::Bcast;
    bcast_ = a.kind != CollKind::Reduce;
    const bool rooted = a.kind != CollKind::Allreduce;
    top_ = rooted ? pos_ == a.root : false;
    if (a.kind == CollKind::Reduce && !top_) out_ = nullptr;  // not written
    LPSGD_CHECK(a.count == 0 || !(reduce_ || top_) || in_,
                coll_name(a.kind) << ": rank " << pos_ << " needs an input buffer");
    LPSGD_CHECK(a.count == 0 || !(bcast_ || top_) || out_,
                coll_name(a.kind) << ": rank " << pos_ << " needs an output buffer");

    // Half the message per tree (tree 0 takes the odd element).
    const size_t half = (a.count + 1) / 2;
    for (int t = 0; t < 2; ++t) {
      Tree& T = trees_[t];
      T.first = t == 0 ? 0 : half;
      T.count = t == 0 ? half : a.count - half;
      T.k = (T.count + elems_ - 1) / elems_;
    }
    if (P_ == 1) return;
    // Ranks in the trees: q = 0..Q-1, at chain position pos(q).
    const int Q = rooted ? P_ - 1 : P_;
    auto pos_of = [&](int q) { return rooted ? (q + 1 + a.root) % P_ : q; };
    for (int t = 0; t < 2; ++t) {
      Tree& T = trees_[t];
      if (top_) {  // the bcast/reduce root: the tree's root is its one child
        T.down[0] = c.tree_link(t, pos_of(tree::dbt_root(t, Q)));
        continue;
      }
      const int q = rooted ? (pos_ - a.root - 1 + P_) % P_ : pos_;
      const tree::Node nd = tree::dbt_node(t, q, Q);
      if (nd.parent >= 0)
        T.up = c.tree_link(t, pos_of(nd.parent));
      else if (rooted)
        T.up = c.tree_link(t, a.root);
      for (int i = 0; i < 2; ++i)
        if (nd.child[i] >= 0) T.down[i] = c.tree_link(t, pos_of(nd.child[i]));
      if (!T.up) T.turn = true;  // an allreduce tree's root turns blocks around
    }
  }

 private:
  // One of the two trees: this rank's links in it and how far each phase got.
  struct Tree {
    size_t first = 0, count = 0, k = 0;  // elements [first, first + count) in k blocks
    Link* up = nullptr;                  // parent (the root, for a tree's root in bcast/reduce)
    std::array<Link*, 2> down{nullptr, nullptr};  // children, lower chain index first
    bool turn = false;                   // allreduce root of this tree
    uint64_t up_tx = 0, up_rx = 0, dn_tx[2] = {0, 0}, dn_rx[2] = {0, 0};
    size_t r_posted[2] = {0, 0}, r_done = 0;  // reduce: receives posted per child, blocks done
    size_t b_posted = 0, b_ready = 0, b_sent[2] = {0, 0}, copied = 0;
    bool advanced = false;
  };

  size_t elems_of(const Tree& T, size_t i) const { return std::min(elems_, T.count - i * elems_); }
  size_t bytes_of(const Tree& T, size_t i) const { return elems_of(T, i) * esize_; }
  const char* in_block(const Tree& T, size_t i) const { return in_ + (T.first + i * elems_) * esize_; }
  char* out_block(const Tree& T, size_t i) const { return out_ + (T.first + i * elems_) * esize_; }

  void on_start() override {
    for (Tree& T : trees_) {
      if (T.up) {
        T.up_tx = T.up->tx_base();
        T.up_rx = T.up->rx_base();
      }
      for (int c = 0; c < 2; ++c)
        if (T.down[c]) {
          T.dn_tx[c] = T.down[c]->tx_base();
          T.dn_rx[c] = T.down[c]->rx_base();
        }
    }
  }

  bool on_progress(bool& moved) override {
    if (P_ == 1) return alone(moved);
    for (bool again = true; again;) {
      again = false;
      for (Tree& T : trees_) {
        if (reduce_) again |= step_reduce(T);
        if (bcast_) again |= step_bcast(T);
      }
      moved |= again;
    }
    bool done = true;
    for (Tree& T : trees_) done &= finished(T);
    return done;
  }

  // One rank: the result is the input (an average of one is itself).
  bool alone(bool& moved) {
    if (!done_alone_) {
      if (args_.count && out_ && in_ != out_) dev_.copy(out_, in_, args_.count * esize_);
      done_alone_ = moved = true;
    }
    return true;
  }

  // ---- reduce: partial sums flow up ---------------------------------------------
  bool step_reduce(Tree& T) {
    bool moved = false;
    for (int c = 0; c < 2; ++c) {
      Link* L = T.down[c];
      if (!L) continue;
      while (T.r_posted[c] < T.k && L->can_recv(T.dn_rx[c] + T.r_posted[c])) {
        L->post_recv(T.dn_rx[c] + T.r_posted[c], bytes_of(T, T.r_posted[c]), nullptr);
        ++T.r_posted[c];
        moved = true;
      }
    }
    while (T.r_done < T.k) {
      const size_t i = T.r_done;
      const void* part[2] = {nullptr, nullptr};
      for (int c = 0; c < 2; ++c)
        if (T.down[c] && !(part[c] = T.down[c]->test_recv(T.dn_rx[c] + i))) return moved;
      const size_t n = elems_of(T, i);
      if (T.up) {
        if (!T.up->can_send(T.up_tx + i)) return moved;
        if (!part[0] && !part[1]) {
          // A leaf: its own block is the partial sum (sent in place).
          T.up->post_send(T.up_tx + i, in_block(T, i), bytes_of(T, i));
        } else {
          void* dst = T.up->send_slot(T.up_tx + i);
          combine(dst, part, in_block(T, i), n, false);
          T.up->post_send(T.up_tx + i, dst, bytes_of(T, i));
        }
      } else {
        combine(out_block(T, i), part, in_block(T, i), n, args_.op == ReduceOp::Avg);
      }
      for (int c = 0; c < 2; ++c)
        if (part[c]) T.down[c]->release_recv(T.dn_rx[c] + i);
      ++T.r_done;
      moved = true;
      if (T.turn) return true;  // forward it down before reducing the next
    }
    return moved;
  }

  // dst = (part0 + mine) + part1, the parts that exist; an average scales by
  // 1/P in the same pass as the last addition.
  void combine(void* dst, const void* const part[2], const void* mine, size_t n, bool avg) {
    const double s = 1.0 / P_;
    const void* acc = mine;
    const int parts = (part[0] ? 1 : 0) + (part[1] ? 1 : 0);
    int added = 0;
    for (int c = 0; c < 2; ++c) {
      if (!part[c]) continue;
      const void* a = c == 0 ? part[c] : acc;
      const void* b = c == 0 ? acc : part[c];
      if (avg && ++added == parts)
        dev_.reduce_add_scale(args_.dtype, dst, a, b, s, n);
      else
        dev_.reduce_add(args_.dtype, dst, a, b, n);
      acc = dst;
    }
    if (acc != dst) {  // no parts (only where there is one rank)
      dev_.copy(dst, acc, n * esize_);
      if (avg) dev_.scale(args_.dtype, dst, s, n);
    }
  }

  // ---- bcast: finished blocks flow down -------------------------------------------
  bool step_bcast(Tree& T) {
    bool moved = false;
    if (T.up) {
      // Into out directly. After a reduce, block i's receive waits until my
      // partial of it has left, since in and out may be the same memory.
      while (T.b_posted < T.k && T.up->can_recv(T.up_rx + T.b_posted) &&
             (!reduce_ || (T.r_done > T.b_posted && T.up->send_done(T.up_tx + T.b_posted)))) {
        T.up->post_recv(T.up_rx + T.b_posted, bytes_of(T, T.b_posted), out_block(T, T.b_posted));
        ++T.b_posted;
        moved = true;
      }
      while (T.b_ready < T.b_posted) {
        const size_t i = T.b_ready;
        const void* d = T.up->test_recv(T.up_rx + i);
        if (!d) break;
        if (d != out_block(T, i)) dev_.copy(out_block(T, i), d, bytes_of(T, i));
        T.up->release_recv(T.up_rx + i);
        ++T.b_ready;
        moved = true;
      }
    } else if (T.turn) {
      T.b_ready = T.r_done;
    } else {
      T.b_ready = T.k;  // the bcast root: its input is ready
    }
    // The bcast root sends from its input and copies it to its output behind.
    const bool from_in = !T.up && !T.turn;
    for (int c = 0; c < 2; ++c) {
      Link* L = T.down[c];
      if (!L) continue;
      while (T.b_sent[c] < T.b_ready && L->can_send(T.dn_tx[c] + T.b_sent[c])) {
        const size_t i = T.b_sent[c];
        L->post_send(T.dn_tx[c] + i, from_in ? in_block(T, i) : out_block(T, i), bytes_of(T, i));
        ++T.b_sent[c];
        moved = true;
      }
    }
    if (from_in && in_ != out_)
      while (T.copied < T.b_sent[0]) {
        dev_.copy(out_block(T, T.copied), in_block(T, T.copied), bytes_of(T, T.copied));
        ++T.copied;
        moved = true;
      }
    return moved;
  }

  bool finished(Tree& T) {
    if (reduce_ && T.r_done < T.k) return false;
    if (bcast_) {
      if (T.b_ready < T.k) return false;
      for (int c = 0; c < 2; ++c)
        if (T.down[c] && T.b_sent[c] < T.k) return false;
      if (!T.up && !T.turn && in_ != out_ && T.copied < T.k) return false;
    }
    // Every send must have left before the caller may touch the buffers.
    const size_t W = static_cast<size_t>(comm_.options().window);
    for (size_t i = T.k > W ? T.k - W : 0; i < T.k; ++i) {
      if (T.up && reduce_ && !T.up->send_done(T.up_tx + i)) return false;
      for (int c = 0; c < 2; ++c)
        if (T.down[c] && bcast_ && !T.down[c]->send_done(T.dn_tx[c] + i)) return false;
    }
    if (!T.advanced) {
      // Number the next collective's blocks after this one's.
      if (T.up) T.up->advance(reduce_ ? T.k : 0, bcast_ ? T.k : 0);
      for (int c = 0; c < 2; ++c)
        if (T.down[c]) T.down[c]->advance(bcast_ ? T.k : 0, reduce_ ? T.k : 0);
      T.advanced = true;
    }
    return true;
  }

  std::string waiting_for() const override {
    std::ostringstream os;
    for (int t = 0; t < 2; ++t) {
      const Tree& T = trees_[t];
      if (reduce_ && T.r_done < T.k) {
        os << "tree " << t << ": partial sum of block " << T.r_done << " from";
        const char* sep = " ";
        for (int c = 0; c < 2; ++c)
          if (T.down[c]) {
            os << sep << "rank " << T.down[c]->peer();
            sep = " and ";
          }
        os << " (children)";
        if (T.up) os << " or a free slot towards rank " << T.up->peer() << " (parent)";
        return os.str();
      }
      if (bcast_ && T.up && T.b_ready < T.k) {
        os << "tree " << t << ": block " << T.b_ready << " from rank " << T.up->peer()
           << " (parent)";
        return os.str();
      }
      for (int c = 0; c < 2; ++c)
        if (bcast_ && T.down[c] && T.b_sent[c] < T.k) {
          os << "tree " << t << ": a free slot towards rank " << T.down[c]->peer() << " (child)";
          return os.str();
        }
    }
    return "outstanding sends of the last blocks";
  }

  Device& dev_;
  size_t esize_ = 4, elems_ = 1;
  int P_ = 1, pos_ = 0;
  const char* in_ = nullptr;
  char* out_ = nullptr;
  bool reduce_ = false, bcast_ = false, top_ = false, done_alone_ = false;
  std::array<Tree, 2> trees_{};
};

}  // namespace

std::unique_ptr<Collective> make_tree(Communicator& c, const CollArgs& a, size_t block_bytes) {
  return std::make_unique<TreeCollective>(c, a, block_bytes);
}

}  // namespace lpsgd::comm
