// The trainer's control channel: the small collectives by which the ranks
// agree on what happens next (stop after a signal, a checkpoint due by rank
// 0's clock, loss sums, parameter checksums) and learn each other's outcomes
// (a checkpoint that could not be written, data that could not be read), on an
// MPI communicator of their own.
//
// Waits end the way the communicator's collectives do: not without end, as
// MPI's blocking calls would, but failing when a neighbour on this machine has
// ended (named after a second), when another rank's error notice arrives, or
// after --comm-timeout.
//
// Lifetimes. A failed wait leaves its MPI request in flight: a non-blocking
// collective cannot be cancelled (MPI forbids it), and a late peer may still
// complete it, writing into its receive buffer, while this rank fails (its
// error path keeps MPI progressing for a moment, see app/entry.cpp). So every
// small collective's buffers live in a block of their own on the heap, and a
// block whose wait failed is abandoned: kept, with its request, until the
// process ends, never freed under MPI.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/error.hpp"

namespace lpsgd::train {

/// What one rank found out, for every rank: ok, a failure it has warned
/// about, or an error to rethrow everywhere.
struct Outcome {
  enum : int { kOk = 0, kUsage = 1, kRuntime = 2, kWarned = 3 };
  int code = kOk;
  std::string message;
};

/// Broadcasts rank `root`'s outcome over `comm` (a plain blocking broadcast:
/// for set-up, before a Control exists); every rank throws it if it is an
/// error. Returns false for kWarned.
bool share_outcome(MPI_Comm comm, Outcome o, int root = 0);

/// Runs f and returns how it ended (an lpsgd::Error keeps its kind).
template <class F>
Outcome attempt(F&& f) {
  Outcome o;
  try {
    f();
  } catch (const Error& e) {
    o.code = e.kind() == ErrorKind::Usage ? Outcome::kUsage : Outcome::kRuntime;
    o.message = e.message();
  } catch (const std::exception& e) {
    o.code = Outcome::kRuntime;
    o.message = e.what();
  }
  return o;
}

class Control {
 public:
  /// Over the ranks of `chain`'s parent (MPI_COMM_WORLD), on a duplicate of
  /// it. `chain` (borrowed) carries the error notices and knows the lost
  /// neighbours. Collective.
  Control(comm::Communicator& chain, double timeout_s);
  ~Control();
  Control(const Control&) = delete;
  Control& operator=(const Control&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return comm_; }

  /// buf[0, n) of type t, combined over all ranks with op, in place.
  /// `what` names it in errors ("agreement on signals at step 12").
  void allreduce(void* buf, int n, MPI_Datatype t, MPI_Op op, const std::string& what);
  /// One value of type t from every rank: out[r] is rank r's *in.
  void allgather(const void* in, void* out, MPI_Datatype t, const std::string& what);

  /// Broadcasts rank `root`'s outcome; every rank throws it if it is an
  /// error, so a failed write on rank 0 stops all ranks with one message.
  /// Returns false for kWarned (the root said what failed; the run goes on).
  bool share(Outcome o, int root = 0);
  /// Every rank learns whether any rank failed `o` (reading its test data,
  /// say): the lowest failing rank's error is thrown on all of them, so one
  /// rank's damaged data stops the job with the same line from every rank
  /// instead of leaving the others stalled in the next collective.
  void agree(const Outcome& o, const std::string& what);

  /// This rank's now_s() clock minus rank 0's, from ping-pongs with rank 0
  /// (the estimate of the one with the shortest round trip: it errs by at
  /// most half that trip); 0 on rank 0. Collective; blocking.
  double clock_offset(int rounds = 16);
  /// Every rank's text, concatenated in rank order on `root` ("" elsewhere).
  /// Collective; blocking.
  std::string gather_text(const std::string& mine, int root = 0);

  /// Small collectives of this process abandoned by a failed wait so far.
  static size_t abandoned();

 private:
  struct Inflight;
  /// Small collectives whose wait failed, their requests perhaps still in
  /// flight: kept until the process ends.
  static std::vector<std::unique_ptr<Inflight>>& abandoned_list();
  void wait(Inflight& f, const std::string& what);
  /// Waits for f (posted); moves it to abandoned_list() if the wait fails.
  void run(std::unique_ptr<Inflight>& f, const std::string& what);

  comm::Communicator& chain_;
  double timeout_s_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

}  // namespace lpsgd::train
