// Ring allreduce baseline: reduce-scatter then allgather around the chain
// closed into a ring, one of P segments per round.
// Cost 2(P−1)(α + nβ/P): bandwidth-optimal, latency linear in P.
//
// Pipelined: every segment is cut into C chunks of about ring_chunk_bytes()
// (cost_model.hpp: 256 KiB; the same cut on every rank,
// from the message's size alone), and the rounds overlap chunk by chunk, as
// gloo's and NCCL's rings do. Chunk k = t·C + c is round t's chunk c; a rank
// sends chunk k as soon as it has received and reduced chunk k − C (the same
// chunk of the round before), so the link never waits for a whole round to
// end: without this, each of the 2(P−1) rounds ended with one round trip of
// idle link (through a deep switch queue, a tenth of a second; the
// 4-namespace switch reached 74% of its links' rate where gloo's ring
// reached 89%).
//   reduce-scatter, round t < P−1: send segment p − t (my input in round 0,
//     my partial sum after), receive segment p − t − 1 from the left into
//     scratch; then out = in + received (an average scales by 1/P in the
//     same pass in the last round: the segment p + 1 this rank finishes).
//   allgather, round P − 1 + u: send segment p + 1 − u, receive segment
//     p − u into out. A receive into out waits until this rank's own send
//     from that region (reduce-scatter round u) has left.
// Each segment is summed on one rank, in the same order, so every rank ends
// with the same bits, run after run.
//
// Where MPI cannot take the device's memory (pinned host staging), or with
// LPSGD_RING_PIPELINE=0, the ring runs round by round as a Schedule
// (schedule.cpp).
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "comm/collectives/factory.hpp"
#include "comm/collectives/schedule.hpp"
#include "comm/communicator.hpp"
#include "comm/cost_model.hpp"
#include "comm/requests.hpp"
#include "core/error.hpp"

namespace lpsgd::comm {
namespace {

constexpr int kRingTag = 8;
/// Receives posted ahead of the one being waited for.
constexpr size_t kRecvsAhead = 16;
/// Chunks sent and not yet complete: 8 MiB in flight covers a link's
/// bandwidth-delay product (25 MB/s x 100 ms, 1.25 GB/s x 1 ms) while the
/// MPI messages in flight between two ranks stay far below the 65,536 at
/// which Open MPI's 16-bit sequence numbers wrap (requests.hpp).
constexpr size_t kSendsAhead = 32;

// The round-by-round schedule, for staged MPI.
std::unique_ptr<Collective> make_ring_schedule(Communicator& c, const CollArgs& a) {
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
  for (int t = 0; t + 1 < P; ++t) {
    const Region mine = seg(Buf::Out, p - t - 1);
    s.exchange(right, seg(Buf::Out, p - t), left, seg(Buf::ScratchA, p - t - 1),
               {{LocalOp::Add, mine, mine, seg(Buf::ScratchA, p - t - 1)}});
  }
  for (int t = 0; t + 1 < P; ++t)
    s.exchange(right, seg(Buf::Out, p + 1 - t), left, seg(Buf::Out, p - t));
  if (a.op == ReduceOp::Avg) s.local({LocalOp::Scale, whole(Buf::Out, n), {}, {}, 1.0 / P});
  return std::make_unique<ScheduleCollective>(c, a, Algo::Ring, std::move(s));
}

// Segments of n elements over P ranks, each cut into C chunks.
struct RingCut {
  size_t n = 0, C = 1;
  int P = 1;
  static RingCut of(size_t n, int P, size_t esize) {
    RingCut r;
    r.n = n;
    r.P = P;
    const size_t seg_bytes = (n + static_cast<size_t>(P) - 1) / static_cast<size_t>(P) * esize;
    r.C = std::max<size_t>(1, (seg_bytes + ring_chunk_bytes() - 1) / ring_chunk_bytes());
    return r;
  }
  // Elements [lo, hi) of chunk c of segment s (any integer s, taken mod P).
  std::pair<size_t, size_t> chunk(int s, size_t c) const {
    s = ((s % P) + P) % P;
    const size_t lo = n * static_cast<size_t>(s) / static_cast<size_t>(P);
    const size_t hi = n * static_cast<size_t>(s + 1) / static_cast<size_t>(P);
    return {lo + (hi - lo) * c / C, lo + (hi - lo) * (c + 1) / C};
  }
};

class RingAllreduce final : public Collective {
 public:
  RingAllreduce(Communicator& c, const CollArgs& a)
      : Collective(c, a, Algo::Ring, ring_chunk_bytes()), dev_(c.device()), esize_(dtype_size(a.dtype)) {
    P_ = c.size();
    p_ = c.rank();
    right_ = (p_ + 1) % P_;
    left_ = (p_ + P_ - 1) % P_;
    cut_ = RingCut::of(a.count, P_, esize_);
    K_ = P_ > 1 ? 2 * static_cast<size_t>(P_ - 1) * cut_.C : 0;
    in_ = static_cast<const char*>(a.in ? a.in : a.out);
    out_ = static_cast<char*>(a.out);
    if (P_ > 1) scratch_ = static_cast<char*>(c.scratch(0, a.count * esize_));
    // Requests of chunk k: sends at [s_off_[k], s_off_[k + 1]), receives alike.
    s_off_.assign(K_ + 1, 0);
    r_off_.assign(K_ + 1, 0);
    for (size_t k = 0; k < K_; ++k) {
      s_off_[k + 1] = s_off_[k] + message_count(bytes(send_range(k)), split(send_range(k)));
      r_off_[k + 1] = r_off_[k] + message_count(bytes(recv_range(k)), split(recv_range(k)));
    }
    s_reqs_.assign(s_off_[K_], MPI_REQUEST_NULL);
    r_reqs_.assign(r_off_[K_], MPI_REQUEST_NULL);
  }

  size_t blocks() const override { return K_; }

 private:
  using Range = std::pair<size_t, size_t>;
  size_t round(size_t k) const { return k / cut_.C; }
  size_t chunk(size_t k) const { return k % cut_.C; }
  bool scatter(size_t k) const { return round(k) + 1 < static_cast<size_t>(P_); }
  Range send_range(size_t k) const {
    const int t = static_cast<int>(round(k));
    return scatter(k) ? cut_.chunk(p_ - t, chunk(k)) : cut_.chunk(p_ + 1 - (t - (P_ - 1)), chunk(k));
  }
  Range recv_range(size_t k) const {
    const int t = static_cast<int>(round(k));
    return scatter(k) ? cut_.chunk(p_ - t - 1, chunk(k)) : cut_.chunk(p_ - (t - (P_ - 1)), chunk(k));
  }
  size_t bytes(const Range& r) const { return (r.second - r.first) * esize_; }
  size_t split(const Range& r) const {
    return transfer_message_bytes(comm_.mpi_message_bytes(), bytes(r));
  }

  void on_start() override {
    // What the device's queue wrote (the input) must be in memory before MPI reads it.
    if (dev_.kind() != DeviceKind::Cpu) dev_.synchronize();
    if (P_ == 1 && in_ != out_ && args_.count) dev_.copy(out_, in_, args_.count * esize_);
  }

  // A receive may be posted once its region is free: scratch always (each
  // round has its own segment); out once my send from it has left.
  bool can_post_recv(size_t k) const {
    if (scatter(k)) return true;
    const size_t conflicting = k - static_cast<size_t>(P_ - 1) * cut_.C;
    return s_done_ > conflicting;
  }
  // Chunk k may go once the chunk it forwards (k − C) has arrived and been reduced.
  bool can_send(size_t k) const { return round(k) == 0 || r_done_ > k - cut_.C; }

  void post_recv(size_t k) {
    const Range r = recv_range(k);
    char* dst = (scatter(k) ? scratch_ : out_) + r.first * esize_;
    post_recvs(dst, bytes(r), split(r), left_, kRingTag, comm_.p2p_comm(), &r_reqs_[r_off_[k]]);
  }
  void post_send(size_t k) {
    const Range r = send_range(k);
    const char* src = (round(k) == 0 ? in_ : out_) + r.first * esize_;
    post_sends(src, bytes(r), split(r), right_, kRingTag, comm_.p2p_comm(), /*sync_last=*/false,
               &s_reqs_[s_off_[k]]);
  }
  // Chunk k has arrived: in the reduce-scatter, out = in + received.
  void arrived(size_t k) {
    if (!scatter(k)) return;
    const Range r = recv_range(k);
    const size_t off = r.first * esize_, len = r.second - r.first;
    const bool last = round(k) + 2 == static_cast<size_t>(P_);
    if (last && args_.op == ReduceOp::Avg)
      dev_.reduce_add_scale(args_.dtype, out_ + off, in_ + off, scratch_ + off, 1.0 / P_, len);
    else
      dev_.reduce_add(args_.dtype, out_ + off, in_ + off, scratch_ + off, len);
    if (dev_.kind() != DeviceKind::Cpu) dev_.synchronize();  // MPI reads it next
  }

  bool on_progress(bool& moved) override {
    if (P_ == 1) return true;
    for (bool again = true; again;) {
      again = false;
      while (r_posted_ < K_ && r_posted_ < r_done_ + kRecvsAhead && can_post_recv(r_posted_)) {
        post_recv(r_posted_++);
        again = true;
      }
      while (r_done_ < r_posted_ && complete(r_reqs_, r_off_, r_done_)) {
        arrived(r_done_++);
        again = true;
      }
      while (s_posted_ < K_ && s_posted_ < s_done_ + kSendsAhead && can_send(s_posted_)) {
        post_send(s_posted_++);
        again = true;
      }
      while (s_done_ < s_posted_ && complete(s_reqs_, s_off_, s_done_)) {
        ++s_done_;
        again = true;
      }
      moved |= again;
    }
    return r_done_ == K_ && s_done_ == K_;
  }
  // Whether chunk k's MPI requests (reqs[off[k], off[k + 1])) have all completed.
  static bool complete(std::vector<MPI_Request>& reqs, const std::vector<size_t>& off, size_t k) {
    return test_all(&reqs[off[k]], off[k + 1] - off[k]);
  }

  void pending_requests(std::vector<MPI_Request*>& out) override {
    for (auto* v : {&s_reqs_, &r_reqs_})
      for (auto& r : *v)
        if (r != MPI_REQUEST_NULL) out.push_back(&r);
  }

  std::string waiting_for() const override {
    std::ostringstream os;
    const auto what = [&](size_t k) {
      std::ostringstream w;
      w << "chunk " << chunk(k) << " of " << (scatter(k) ? "reduce-scatter" : "allgather")
        << " round " << (scatter(k) ? round(k) : round(k) - (P_ - 1));
      return w.str();
    };
    if (r_done_ < K_)
      os << what(r_done_) << " from rank " << left_ << " (left on the ring)";
    if (s_done_ < K_)
      os << (r_done_ < K_ ? ", or " : "") << "the send of " << what(s_done_) << " to rank "
         << right_ << " (right on the ring)";
    return os.str();
  }

  Device& dev_;
  size_t esize_;
  int P_ = 1, p_ = 0, right_ = 0, left_ = 0;
  RingCut cut_;
  size_t K_ = 0;
  const char* in_ = nullptr;
  char* out_ = nullptr;
  char* scratch_ = nullptr;
  std::vector<size_t> s_off_, r_off_;
  std::vector<MPI_Request> s_reqs_, r_reqs_;
  size_t r_posted_ = 0, r_done_ = 0, s_posted_ = 0, s_done_ = 0;
};

}  // namespace

std::unique_ptr<Collective> make_ring(Communicator& c, const CollArgs& a) {
  // LPSGD_RING_PIPELINE=0: round by round everywhere (to measure the difference).
  static const bool rounds = [] {
    const char* v = std::getenv("LPSGD_RING_PIPELINE");
    return v && std::string(v) == "0";
  }();
  if (rounds || c.stages_through_host()) return make_ring_schedule(c, a);
  return std::make_unique<RingAllreduce>(c, a);
}

}  // namespace lpsgd::comm
