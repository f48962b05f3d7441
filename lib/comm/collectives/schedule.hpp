// A collective as a list of rounds, for the baseline algorithms (MST, BE, ring).
//
// Each Step posts its sends and receives together (MPI point-to-point on the
// communicator's p2p communicator, the same transport LP's MPI links use), and
// when all of them have completed runs its local operations (reduce, copy,
// scale). On a GPU whose MPI is not CUDA-aware every transfer goes through a
// pinned host copy of its region (Communicator::host_stage). Buffers are named, not pointed to, so a schedule is built once from
// (P, rank, root, count) and reads like the textbook algorithm.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "comm/collective.hpp"

namespace lpsgd::comm {

enum class Buf : uint8_t { In, Out, ScratchA, ScratchB };

/// Elements [off, off + len) of a named buffer.
struct Region {
  Buf buf = Buf::Out;
  size_t off = 0;
  size_t len = 0;
};

struct Xfer {
  int peer;  ///< chain position
  Region r;
};

struct LocalOp {
  enum Kind { Add, Copy, Scale } kind;
  Region dst, a, b;  ///< Add: dst = a + b; Copy: dst = a; Scale: dst *= alpha
  double alpha = 1;
};

struct Step {
  std::vector<Xfer> sends, recvs;
  std::vector<LocalOp> after;
};

/// Helper the builders use: a schedule for one rank.
struct Schedule {
  std::vector<Step> steps;
  Step& next() { return steps.emplace_back(); }
  void send(int peer, Region r) {
    if (r.len) next().sends.push_back({peer, r});
  }
  void recv(int peer, Region r) {
    if (r.len) next().recvs.push_back({peer, r});
  }
  /// Sends and receives in one round (exchange); empty regions are skipped.
  void exchange(int send_peer, Region s, int recv_peer, Region r, std::vector<LocalOp> after = {});
  void local(LocalOp op) {
    if (op.dst.len) next().after.push_back(op);
  }
};

inline Region whole(Buf b, size_t n) { return {b, 0, n}; }

class ScheduleCollective final : public Collective {
 public:
  ScheduleCollective(Communicator& c, const CollArgs& a, Algo algo, Schedule schedule);

 private:
  void on_start() override {}
  bool on_progress(bool& moved) override;
  std::string waiting_for() const override;
  void pending_requests(std::vector<MPI_Request*>& out) override;
  void post(const Step& s);
  void run_local(const Step& s);
  char* ptr(const Region& r) const;

  Schedule sched_;
  size_t cur_ = 0;
  bool posted_ = false;
  std::vector<MPI_Request> reqs_;
  char* host(const Region& r) const;
  char* base_[4] = {nullptr, nullptr, nullptr, nullptr};
  char* host_[4] = {nullptr, nullptr, nullptr, nullptr};  // pinned staging, when MPI
                                                          // cannot take device memory
  size_t esize_;
};

}  // namespace lpsgd::comm
