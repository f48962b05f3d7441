// Linear-pipelined (LP) broadcast, reduce and allreduce along the chain.
//
// The message is cut into k blocks of b bytes. Every collective is one machine
// with a centre c:
//   bcast     c = root; blocks flow outward from c, left and right at once.
//   reduce    c = root; partial sums flow inward from both ends to c.
//   allreduce c = middle of the chain; partial sums flow inward, and every
//             block finished at c turns straight around and flows outward, so
//             both directions of every link are busy at the same time.
// For a rank left of c the "outer" neighbour is its left one and the "inner"
// its right one (mirrored right of c); c itself has two outer neighbours.
//
// Per block j, a rank:
//   reduce phase:  waits for the partial sum from its outer neighbour, adds its
//                  own block (one pass, written straight into the inner link's
//                  send slot) and passes it inward; c adds both partials to its
//                  own block: out = (left + mine) + right.
//   bcast phase:   receives the finished block from its inner neighbour into
//                  out (MPI links deliver there directly) and forwards it outward.
// The sum order is fixed by chain position, so every rank ends with the same
// bits, run after run. At most W blocks are in flight per link direction.
//
// Two ranks of one node whose buffers both can address (from
// Communicator::alloc_shared, as the trainer's and the bench's are) need no
// pipeline: each does its half of the message and writes straight into
// whichever outputs need it (step_direct; LPSGD_LP_DIRECT=0 turns it off):
//   allreduce  out0 = out1 = x0 + x1: each rank reads n and writes n bytes,
//              what a copy of its message moves (one centre: 2n and n);
//   reduce     out_root = x0 + x1: each reads n and writes n/2;
//   bcast      out0 = out1 = in_root: each reads n/2 and writes n.
// Sums keep the order x0 + x1, so the bits are the pipeline's. The signature
// exchange tells each rank where the other's buffers are (or that one cannot
// share, and both take the pipeline); two tokens over the link then say "my
// earlier collectives are done" (before either touches the other's buffers)
// and "my half is done".
//
// Allreduce of two ranks can also share the reductions over any link
// (LpPairAllreduce, below; LPSGD_LP_PAIR=1): rank r is the centre of the
// blocks j with j % 2 == r, so each rank reduces half the blocks (read 2,
// write 1) and copies the other half (read 1, write 1), 2.5 memory passes
// per block where one centre makes 3.
//
// A 16-bit message whose input is float (CollArgs::in_float: the trainer's
// --wire bf16 reads its float gradients) is converted where the input is
// first read: a chain end converts its block into the send slot and every
// addition with this rank's input rounds that operand to 16 bits as it reads
// it (Device::reduce_add_from): the bits of converting first. The two halves
// of a node, where nothing travels, add the two float inputs in float and
// round the sum once (Device::reduce_add_float_to): one rounding where the
// chain makes three, and a pass about as cheap as the float message's.
#include <algorithm>
#include <array>
#include <memory>
#include <sstream>
#include <vector>

#include "comm/collectives/factory.hpp"
#include "comm/communicator.hpp"
#include "comm/cost_model.hpp"
#include "core/error.hpp"

namespace lpsgd::comm {
namespace {

// What every LP collective shares: the message cut into k blocks of `elems_`
// elements, and where block j lies in the input and the output.
class LpBlocks : public Collective {
 protected:
  LpBlocks(Communicator& c, const CollArgs& a, size_t block_bytes)
      : Collective(c, a, Algo::Lp, block_bytes),
        dev_(c.device()),
        esize_(dtype_size(a.dtype)),
        in_esize_(dtype_size(a.in_type())) {
    elems_ = elems_per_block(Algo::Lp, block_bytes, a.dtype);
    k_ = (a.count + elems_ - 1) / elems_;
    in_ = static_cast<const char*>(a.in ? a.in : a.out);
    out_ = static_cast<char*>(a.out);
    uncached_ = a.count * esize_ >= dev_.uncached_min_bytes();
  }
  // Writes into the output: past the caches where the message is larger than
  // they are (nobody reads a block of it again soon), else plain.
  void put(char* dst, const void* src, size_t bytes) {
    if (uncached_) dev_.copy_uncached(dst, src, bytes);
    else dev_.copy(dst, src, bytes);
  }
  // dst = (a + b) * alpha: reduce_add_scale's rounding where alpha != 1 (the
  // last addition of an average), else a plain sum.
  void add(char* dst, const void* a, const void* b, size_t n, double alpha = 1.0) {
    if (alpha != 1.0) dev_.reduce_add_scale(args_.dtype, dst, a, b, alpha, n);
    else if (uncached_) dev_.reduce_add_uncached(args_.dtype, dst, a, b, n);
    else dev_.reduce_add(args_.dtype, dst, a, b, n);
  }
  // dst = (a + b) * alpha where a, b or both are this rank's input (a_in,
  // b_in): read as the message's type, a float input rounded as it is read.
  void add_in(char* dst, const void* a, bool a_in, const void* b, bool b_in, size_t n,
              double alpha = 1.0) {
    if (!args_.in_float) return add(dst, a, b, n, alpha);
    const DType t = args_.dtype;
    dev_.reduce_add_from(t, dst, nullptr, a_in ? DType::F32 : t, a, b_in ? DType::F32 : t, b,
                         alpha, n);
  }
  // dst = this rank's input block j, in the message's type.
  void put_in(char* dst, size_t j) {
    if (args_.in_float) dev_.convert(args_.dtype, dst, DType::F32, in_block(j), block_elems(j));
    else put(dst, in_block(j), block_bytes_of(j));
  }
  size_t blocks() const override { return k_; }
  size_t block_elems(size_t j) const { return std::min(elems_, args_.count - j * elems_); }
  size_t block_bytes_of(size_t j) const { return block_elems(j) * esize_; }
  const char* in_block(size_t j) const { return in_ + j * elems_ * in_esize_; }
  char* out_block(size_t j) const { return out_ + j * elems_ * esize_; }

  Device& dev_;
  size_t esize_ = 4, in_esize_ = 4, elems_ = 1, k_ = 0;
  const char* in_ = nullptr;
  char* out_ = nullptr;
  bool uncached_ = false;
};

class LpCollective final : public LpBlocks {
 public:
  LpCollective(Communicator& c, const CollArgs& a, size_t block_bytes)
      : LpBlocks(c, a, block_bytes) {
    const Chain& ch = c.chain();
    P_ = ch.size();
    pos_ = ch.pos();
    center_ = a.kind == CollKind::Allreduce ? (P_ - 1) / 2 : a.root;
    reduce_ = a.kind != CollKind::Bcast;
    bcast_ = a.kind != CollKind::Reduce;
    if (a.kind == CollKind::Reduce && pos_ != center_) out_ = nullptr;  // not written
    LPSGD_CHECK(!(pos_ == center_ || bcast_) || out_ || a.count == 0,
                coll_name(a.kind) << ": rank " << pos_ << " needs an output buffer");
    LPSGD_CHECK(!(reduce_ || pos_ == center_) || in_ || a.count == 0,
                coll_name(a.kind) << ": rank " << pos_ << " needs an input buffer");
    Link* left = c.left_link();
    Link* right = c.right_link();
    if (pos_ < center_) {
      outer_[0] = left;
      inner_ = right;
    } else if (pos_ > center_) {
      outer_[0] = right;
      inner_ = left;
    } else {
      outer_[0] = left;
      outer_[1] = right;
    }
    if (lp_direct(a.kind, P_) && a.count > 0) {
      other_ = pos_ == 0 ? right : left;
      share_in_ = other_->share(in_, a.count * in_esize_);
      share_out_ = other_->share(out_, a.count * esize_);
      offer_buffers(share_in_, share_out_);
    }
  }
  std::string variant() const override { return direct_link_ ? "halves" : "chain"; }

 private:
  uint64_t o_rx(int o, size_t j) const { return rx_base_o_[o] + j; }
  uint64_t o_tx(int o, size_t j) const { return tx_base_o_[o] + j; }
  uint64_t i_rx(size_t j) const { return rx_base_i_ + j; }
  uint64_t i_tx(size_t j) const { return tx_base_i_ + j; }

  // Block numbers continue from where the link's previous collective ended.
  void on_start() override {
    for (int o = 0; o < 2; ++o)
      if (outer_[o]) {
        rx_base_o_[o] = outer_[o]->rx_base();
        tx_base_o_[o] = outer_[o]->tx_base();
      }
    if (inner_) {
      rx_base_i_ = inner_->rx_base();
      tx_base_i_ = inner_->tx_base();
    }
    if (share_in_ || share_out_) {
      // Both ranks decide alike: each sees both ranks' handles.
      const Signature& peer = neighbour_signature(pos_ == 0 ? 1 : 0);
      const int me = pos_, other = 1 - pos_;
      uint64_t hx[2], hy[2];  // by chain position: inputs, outputs
      hx[me] = share_in_;
      hy[me] = share_out_;
      hx[other] = peer.share_in;
      hy[other] = peer.share_out;
      const int R = args_.root;
      const bool can = args_.kind == CollKind::Allreduce ? hx[0] && hx[1] && hy[0] && hy[1]
                       : args_.kind == CollKind::Reduce  ? hx[0] && hx[1] && hy[R]
                                                         : hx[R] && hy[0] && hy[1];
      if (can) {
        direct_link_ = other_;
        d_tx_ = direct_link_->tx_base();
        d_rx_ = direct_link_->rx_base();
        x_[me] = in_;
        y_[me] = out_;
        x_[other] = direct_link_->peer_memory(hx[other]);
        y_[other] = direct_link_->peer_memory(hy[other]);
        // My half, cut at a multiple of 64 bytes: no cache line has two
        // writers where the buffers start on a line (alloc_shared's do).
        const size_t line = std::max<size_t>(1, 64 / esize_);
        const size_t cut = args_.count / 2 / line * line;
        d_begin_ = pos_ == 0 ? 0 : cut;
        d_end_ = pos_ == 0 ? cut : args_.count;
      }
    }
  }

  bool on_progress(bool& moved) override {
    if (direct_link_) return step_direct(moved);
    for (bool again = true; again;) {
      again = false;
      if (reduce_) again |= step_reduce();
      if (bcast_) again |= step_bcast();
      moved |= again;
    }
    return finished();
  }

  // ---- two ranks of a node, each doing half (see the top of the file) ----------
  void direct_half() {
    const size_t off = d_begin_ * esize_, n = d_end_ - d_begin_;
    const double alpha = args_.op == ReduceOp::Avg ? 1.0 / P_ : 1.0;
    const char* x0 = x_[0] + d_begin_ * in_esize_;
    const char* x1 = x_[1] + d_begin_ * in_esize_;
    const DType t = args_.dtype;
    switch (args_.kind) {
      case CollKind::Allreduce:  // one pass: each byte read once, written once
        if (args_.in_float)  // nothing travels: the float sum, rounded once
          dev_.reduce_add_float_to(t, y_[0] + off, y_[1] + off, reinterpret_cast<const float*>(x0),
                                   reinterpret_cast<const float*>(x1), alpha, n);
        else
          dev_.reduce_add_twice(t, y_[0] + off, y_[1] + off, x0, x1, alpha, n, uncached_);
        break;
      case CollKind::Reduce:
        if (args_.in_float)
          dev_.reduce_add_float_to(t, y_[args_.root] + off, nullptr, reinterpret_cast<const float*>(x0),
                                   reinterpret_cast<const float*>(x1), alpha, n);
        else
          add(y_[args_.root] + off, x0, x1, n, alpha);
        break;
      case CollKind::Bcast: {
        // Piece by piece, so that the second output reads the root's input
        // from the cache.
        const char* src = x_[args_.root] + off;
        const size_t bytes = n * esize_, piece = 256u << 10;
        for (size_t b = 0; b < bytes; b += piece)
          for (char* y : y_)
            if (y + off != src) put(y + off + b, src + b, std::min(piece, bytes - b));
        break;
      }
    }
  }

  bool step_direct(bool& moved) {
    // Token 0, "my collectives before this one are done": only then may the
    // other rank touch my buffers (an earlier collective of mine, on the same
    // memory, may end later than the other rank's part of it). Its release
    // store also publishes my input.
    if (!swap_token(0, moved)) return false;
    if (!d_done_) {
      direct_half();
      d_done_ = moved = true;
    }
    // Token 1, "my half is done": the other rank may return once it has this
    // (its output complete, its input no longer read), and I once I have its.
    if (!swap_token(1, moved)) return false;
    if (!advanced_) {
      direct_link_->advance(2, 2);
      advanced_ = true;
    }
    return true;
  }

  // Sends token t to the other rank and takes its token t; true once both
  // are through.
  bool swap_token(int t, bool& moved) {
    Link* L = direct_link_;
    const uint64_t tx = d_tx_ + static_cast<uint64_t>(t), rx = d_rx_ + static_cast<uint64_t>(t);
    if (!d_sent_[t]) {
      if (!L->can_send(tx)) return false;
      L->post_send(tx, &d_token_, sizeof d_token_);
      d_sent_[t] = moved = true;
    }
    if (!d_posted_[t]) {
      if (!L->can_recv(rx)) return false;
      L->post_recv(rx, sizeof d_peer_token_, &d_peer_token_);
      d_posted_[t] = moved = true;
    }
    if (!d_received_[t]) {
      if (!L->test_recv(rx)) return false;
      L->release_recv(rx);
      d_received_[t] = moved = true;
    }
    return L->send_done(tx);
  }

  // ---- reduce phase: partial sums flow inward --------------------------------
  bool step_reduce() {
    bool moved = false;
    while (r_done_ < k_) {
      // Keep receives for partial sums from the outer neighbours posted, W ahead.
      for (int o = 0; o < 2; ++o) {
        Link* L = outer_[o];
        if (!L) continue;
        while (r_posted_[o] < k_ && L->can_recv(o_rx(o, r_posted_[o]))) {
          L->post_recv(o_rx(o, r_posted_[o]), block_bytes_of(r_posted_[o]), nullptr);
          ++r_posted_[o];
          moved = true;
        }
      }
      const size_t j = r_done_;
      const void* part[2] = {nullptr, nullptr};
      for (int o = 0; o < 2; ++o)
        if (outer_[o] && !(part[o] = outer_[o]->test_recv(o_rx(o, j)))) return moved;
      const size_t n = block_elems(j);
      if (inner_) {
        // Not the centre: my partial = outer partial + mine, passed inward.
        if (!inner_->can_send(i_tx(j))) return moved;
        if (part[0]) {
          void* dst = inner_->send_slot(i_tx(j));
          // (Into a send slot the neighbour reads next: through the caches.)
          if (args_.in_float) add_in(static_cast<char*>(dst), part[0], false, in_block(j), true, n);
          else dev_.reduce_add(args_.dtype, dst, part[0], in_block(j), n);
          outer_[0]->release_recv(o_rx(0, j));
          inner_->post_send(i_tx(j), dst, block_bytes_of(j));
        } else if (args_.in_float) {
          // Chain end of a float input: converted into the send slot.
          void* dst = inner_->send_slot(i_tx(j));
          put_in(static_cast<char*>(dst), j);
          inner_->post_send(i_tx(j), dst, block_bytes_of(j));
        } else {
          // Chain end: my own block is the partial sum (MPI sends it in place).
          inner_->post_send(i_tx(j), in_block(j), block_bytes_of(j));
        }
      } else {
        // The centre: out = (left + mine) + right, the fixed order; an average
        // scales by 1/P in the same pass as the last addition.
        const bool avg = args_.op == ReduceOp::Avg;
        const void* acc = in_block(j);
        bool acc_in = true;  // acc is my input (of the input's type)
        auto add = [&](const void* a, bool a_in, const void* b, bool b_in, bool last) {
          add_in(out_block(j), a, a_in, b, b_in, n, avg && last ? 1.0 / P_ : 1.0);
          acc = out_block(j);
          acc_in = false;
        };
        if (part[0]) add(part[0], false, acc, acc_in, !part[1]);
        if (part[1]) add(acc, acc_in, part[1], false, true);
        if (acc_in) {
          put_in(out_block(j), j);
          if (avg) dev_.scale(args_.dtype, out_block(j), 1.0 / P_, n);
        }
        for (int o = 0; o < 2; ++o)
          if (part[o]) outer_[o]->release_recv(o_rx(o, j));
      }
      ++r_done_;
      // One block at a time: the caller forwards it (bcast phase) before the
      // next is reduced, so a fast neighbour cannot keep this rank reducing
      // the whole message while the other direction idles.
      return true;
    }
    return moved;
  }

  // ---- bcast phase: finished blocks flow outward --------------------------------
  bool step_bcast() {
    bool moved = false;
    if (inner_) {
      // Receive finished blocks from the inner neighbour straight into out.
      // With a reduce phase, block j's receive waits until my partial for j has
      // left, since in and out may be the same memory.
      while (b_posted_ < k_ && inner_->can_recv(i_rx(b_posted_)) &&
             (!reduce_ || (r_done_ > b_posted_ && inner_->send_done(i_tx(b_posted_))))) {
        inner_->post_recv(i_rx(b_posted_), block_bytes_of(b_posted_), out_block(b_posted_));
        ++b_posted_;
        moved = true;
      }
      while (b_ready_ < b_posted_) {
        const size_t j = b_ready_;
        const void* d = inner_->test_recv(i_rx(j));
        if (!d) break;
        if (d != out_block(j)) put(out_block(j), d, block_bytes_of(j));
        inner_->release_recv(i_rx(j));
        ++b_ready_;
        moved = true;
      }
    } else {
      // The centre: blocks are ready once reduced (allreduce) or at once
      // (bcast: the root sends its input, which stays unchanged until the end,
      // so its neighbours start at once; its own copy into out runs beside).
      if (args_.kind == CollKind::Bcast) {
        moved |= b_ready_ != k_;
        b_ready_ = k_;
      } else {
        b_ready_ = r_done_;
      }
    }
    // Forward ready blocks outward.
    for (int o = 0; o < 2; ++o) {
      Link* L = outer_[o];
      if (!L) continue;
      while (b_sent_[o] < b_ready_ && L->can_send(o_tx(o, b_sent_[o]))) {
        const size_t j = b_sent_[o];
        L->post_send(o_tx(o, j), root_copies() ? in_block(j) : out_block(j), block_bytes_of(j));
        ++b_sent_[o];
        moved = true;
      }
    }
    // The root's copy of its input into its output, a few blocks at a time
    // so that sends keep flowing between them.
    if (root_copies() && copied_ < k_) {
      for (const size_t end = std::min(k_, copied_ + 4); copied_ < end; ++copied_)
        put(out_block(copied_), in_block(copied_), block_bytes_of(copied_));
      moved = true;
    }
    return moved;
  }

  bool root_copies() const {
    return args_.kind == CollKind::Bcast && pos_ == center_ && in_ != out_;
  }

  bool finished() {
    if (reduce_ && r_done_ < k_) return false;
    if (root_copies() && copied_ < k_) return false;
    if (bcast_) {
      if (b_ready_ < k_) return false;
      for (int o = 0; o < 2; ++o)
        if (outer_[o] && b_sent_[o] < k_) return false;
    }
    // Every send must have left before the caller may touch the buffers.
    const size_t W = static_cast<size_t>(comm_.options().window);
    for (size_t j = k_ > W ? k_ - W : 0; j < k_; ++j) {
      if (inner_ && reduce_ && !inner_->send_done(i_tx(j))) return false;
      for (int o = 0; o < 2; ++o)
        if (outer_[o] && bcast_ && !outer_[o]->send_done(o_tx(o, j))) return false;
    }
    if (!advanced_) {
      // Number the next collective's blocks after this one's.
      for (int o = 0; o < 2; ++o)
        if (outer_[o]) outer_[o]->advance(bcast_ ? k_ : 0, reduce_ ? k_ : 0);
      if (inner_) inner_->advance(reduce_ ? k_ : 0, bcast_ ? k_ : 0);
      advanced_ = true;
    }
    return true;
  }

  std::string waiting_for() const override {
    std::ostringstream os;
    auto side = [&](const Link* L) { return L->peer() < pos_ ? "left" : "right"; };
    if (direct_link_) {
      const Link* L = direct_link_;
      const int t = d_received_[0] ? 1 : 0;
      os << (d_sent_[t] ? "rank " : "a free slot towards rank ") << L->peer() << " (" << side(L)
         << " neighbour)"
         << (d_sent_[t] ? (t == 0 ? " to finish its collectives before this one"
                                  : " to finish its half of the message")
                        : "");
      return os.str();
    }
    if (reduce_ && r_done_ < k_) {
      const char* sep = "";
      for (int o = 0; o < 2; ++o)
        if (outer_[o]) {
          os << sep << "partial sum of block " << r_done_ << " from rank " << outer_[o]->peer()
             << " (" << side(outer_[o]) << " neighbour)";
          sep = " and ";
        }
      if (inner_)
        os << (*sep ? " or " : "") << "a free slot towards rank " << inner_->peer() << " ("
           << side(inner_) << " neighbour) for block " << r_done_;
      os << " of " << k_;
      return os.str();
    }
    if (bcast_ && inner_ && b_ready_ < k_)
      os << "finished block " << b_ready_ << " of " << k_ << " from rank " << inner_->peer()
         << " (" << side(inner_) << " neighbour)";
    else {
      os << "outstanding sends of the last blocks (up to block " << k_ - 1 << ") to ";
      const char* sep = "";
      for (int o = 0; o < 2; ++o)
        if (outer_[o]) {
          os << sep << "rank " << outer_[o]->peer() << " (" << side(outer_[o]) << " neighbour)";
          sep = " and ";
        }
      if (!*sep) os << "the outer neighbours";
    }
    return os.str();
  }

  int P_ = 1, pos_ = 0, center_ = 0;
  bool reduce_ = false, bcast_ = false, advanced_ = false;
  std::array<Link*, 2> outer_{nullptr, nullptr};
  Link* inner_ = nullptr;
  uint64_t rx_base_o_[2] = {0, 0}, tx_base_o_[2] = {0, 0};
  uint64_t rx_base_i_ = 0, tx_base_i_ = 0;
  size_t r_posted_[2] = {0, 0};
  size_t r_done_ = 0;
  size_t b_posted_ = 0, b_ready_ = 0;
  size_t b_sent_[2] = {0, 0};
  size_t copied_ = 0;  // bcast root: blocks of its input copied into its output
  // Two ranks of a node, each doing half: the handles offered, both ranks'
  // buffers by chain position, my half [d_begin_, d_end_) and the tokens.
  uint64_t share_in_ = 0, share_out_ = 0;
  Link* other_ = nullptr;        // the link to the other rank
  Link* direct_link_ = nullptr;  // the same, once both ranks chose the direct way
  const char* x_[2] = {nullptr, nullptr};
  char* y_[2] = {nullptr, nullptr};
  uint64_t d_tx_ = 0, d_rx_ = 0;
  size_t d_begin_ = 0, d_end_ = 0;
  uint64_t d_token_ = 1, d_peer_token_ = 0;
  bool d_done_ = false;
  bool d_sent_[2] = {false, false}, d_posted_[2] = {false, false}, d_received_[2] = {false, false};
};

// Allreduce of two ranks with the centre alternating by block. Block j's
// centre (rank j % 2) receives the other rank's block j (a "partial"), writes
// out_j = x0 + x1 (rank 0's block first, the order the single-centre LP uses)
// and sends out_j back (a "final"). Each direction of the one link carries one
// message per block, in a fixed order both ranks compute: the sender's
// partials lead its finals by D = W/2 messages, then the two alternate; with
// the receiver handling messages strictly in that order, every message waits
// only for messages earlier in the other direction, so nothing deadlocks.
class LpPairAllreduce final : public LpBlocks {
 public:
  LpPairAllreduce(Communicator& c, const CollArgs& a, size_t block_bytes)
      : LpBlocks(c, a, block_bytes) {
    me_ = c.chain().pos();
    link_ = me_ == 0 ? c.right_link() : c.left_link();
    LPSGD_CHECK(link_, "LP allreduce of 2 ranks: no link to the other rank");
    LPSGD_CHECK(a.count == 0 || (in_ && out_), "allreduce: rank " << me_ << " needs buffers");
    const size_t lead = std::max(1, link_->window() / 2);
    tx_ = order(me_, lead);
    rx_ = order(1 - me_, lead);
    tx_pos_of_block_.assign(k_, 0);
    for (size_t t = 0; t < tx_.size(); ++t) tx_pos_of_block_[tx_[t].block] = t;
    reduced_.assign(k_, 0);
  }

 private:
  struct Msg {
    size_t block;
    bool final;  // the sender's finished block, else its own input for the receiver to reduce
  };
  // The messages rank r sends, in order: partials of the other rank's blocks
  // lead its finals (its own blocks) by `lead`, then the two alternate.
  std::vector<Msg> order(int r, size_t lead) const {
    std::vector<Msg> m;
    size_t own = static_cast<size_t>(r), other = static_cast<size_t>(1 - r);  // next block of each kind
    size_t partials = 0;
    while (own < k_ || other < k_) {
      const bool partial_due = partials < lead || m.empty() || m.back().final;
      if (other < k_ && (partial_due || own >= k_)) {
        m.push_back({other, false});
        other += 2;
        ++partials;
      } else {
        m.push_back({own, true});
        own += 2;
      }
    }
    return m;
  }

  void on_start() override {
    tx_base_ = link_->tx_base();
    rx_base_ = link_->rx_base();
  }

  bool on_progress(bool& moved) override {
    for (bool again = true; again;) {
      again = false;
      // Receives, W ahead, in order. A final lands in out_j, which may be my
      // input: only once my partial of block j has left.
      while (posted_ < rx_.size() && link_->can_recv(rx_base_ + posted_)) {
        const Msg& m = rx_[posted_];
        if (m.final && !link_->send_done(tx_base_ + tx_pos_of_block_[m.block])) break;
        link_->post_recv(rx_base_ + posted_, block_bytes_of(m.block),
                         m.final ? out_block(m.block) : nullptr);
        ++posted_;
        again = true;
      }
      // Arrived messages, in order.
      while (handled_ < posted_) {
        const Msg& m = rx_[handled_];
        const void* d = link_->test_recv(rx_base_ + handled_);
        if (!d) break;
        const size_t j = m.block, n = block_elems(j);
        if (m.final) {
          if (d != out_block(j)) put(out_block(j), d, block_bytes_of(j));
        } else {
          // I am block j's centre: out = x0 + x1 (an average scales in the same pass).
          const bool mine_first = me_ == 0;
          const void* a = mine_first ? in_block(j) : d;
          const void* b = mine_first ? d : in_block(j);
          add_in(out_block(j), a, mine_first, b, !mine_first, n,
                 args_.op == ReduceOp::Avg ? 0.5 : 1.0);
          reduced_[j] = 1;
        }
        link_->release_recv(rx_base_ + handled_);
        ++handled_;
        again = true;
      }
      // Sends, in order: my input for the other rank's blocks, my finished blocks.
      while (sent_ < tx_.size()) {
        const Msg& m = tx_[sent_];
        if (m.final && !reduced_[m.block]) break;
        if (!link_->can_send(tx_base_ + sent_)) break;
        const void* src = m.final ? out_block(m.block) : in_block(m.block);
        if (!m.final && args_.in_float) {  // my float input, converted into the send slot
          void* slot = link_->send_slot(tx_base_ + sent_);
          put_in(static_cast<char*>(slot), m.block);
          src = slot;
        }
        link_->post_send(tx_base_ + sent_, src, block_bytes_of(m.block));
        ++sent_;
        again = true;
      }
      moved |= again;
    }
    if (handled_ < rx_.size() || sent_ < tx_.size()) return false;
    // Every send must have left before the caller may touch the buffers.
    const size_t W = static_cast<size_t>(link_->window());
    for (size_t t = tx_.size() > W ? tx_.size() - W : 0; t < tx_.size(); ++t)
      if (!link_->send_done(tx_base_ + t)) return false;
    if (!advanced_) {
      link_->advance(tx_.size(), rx_.size());
      advanced_ = true;
    }
    return true;
  }

  std::string waiting_for() const override {
    std::ostringstream os;
    const char* side = me_ == 0 ? "right" : "left";
    if (handled_ < rx_.size()) {
      const Msg& m = rx_[handled_];
      os << (m.final ? "finished block " : "input of block ") << m.block << " from rank "
         << link_->peer() << " (" << side << " neighbour)";
      if (sent_ < tx_.size()) os << " or a free slot towards it";
    } else if (sent_ < tx_.size()) {
      os << "a free slot towards rank " << link_->peer() << " (" << side
         << " neighbour) for block " << tx_[sent_].block;
    } else {
      os << "outstanding sends of the last blocks to rank " << link_->peer();
    }
    return os.str();
  }

  Link* link_ = nullptr;
  int me_ = 0;
  std::vector<Msg> tx_, rx_;
  std::vector<size_t> tx_pos_of_block_;
  std::vector<char> reduced_;
  uint64_t tx_base_ = 0, rx_base_ = 0;
  size_t posted_ = 0, handled_ = 0, sent_ = 0;
  bool advanced_ = false;
};

}  // namespace

std::unique_ptr<Collective> make_lp(Communicator& c, const CollArgs& a, size_t block_bytes) {
  if (lp_shares_reductions(a.kind, c.chain().size()))
    return std::make_unique<LpPairAllreduce>(c, a, block_bytes);
  return std::make_unique<LpCollective>(c, a, block_bytes);
}

}  // namespace lpsgd::comm
