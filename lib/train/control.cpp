// The trainer's control channel (see control.hpp).
#include "train/control.hpp"

#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "core/cli.hpp"
#include "core/timer.hpp"

namespace lpsgd::train {

// One small collective's request and buffers.
struct Control::Inflight {
  MPI_Request req = MPI_REQUEST_NULL;
  std::vector<unsigned char> in, out;
};

namespace {

std::mutex g_abandoned_mutex;

size_t type_bytes(MPI_Datatype t) {
  int n = 0;
  MPI_CHECK(MPI_Type_size(t, &n));
  return static_cast<size_t>(n);
}

}  // namespace

Control::Control(comm::Communicator& chain, double timeout_s) : chain_(chain), timeout_s_(timeout_s) {
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

// While an error unwinds, a small collective may still be in flight on the
// communicator: it is left to the process's end rather than freed (freeing it
// is collective in effect on some MPI libraries, and the others are failing).
Control::~Control() {
  if (std::uncaught_exceptions() == 0 && !chain_.failed()) MPI_Comm_free(&comm_);
}

std::vector<std::unique_ptr<Control::Inflight>>& Control::abandoned_list() {
  static auto* list = new std::vector<std::unique_ptr<Inflight>>();  // never destroyed
  return *list;
}

size_t Control::abandoned() {
  std::lock_guard<std::mutex> lock(g_abandoned_mutex);
  return abandoned_list().size();
}

void Control::wait(Inflight& f, const std::string& what) {
  const double t0 = now_s();
  double checked = t0;
  for (int spins = 0;; ++spins) {
    int done = 0;
    MPI_CHECK(MPI_Test(&f.req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (spins > 1000) std::this_thread::yield();  // ranks may share cores
    const double now = now_s();
    std::string stall;
    if (now - t0 > 1.0 && now - checked > 0.5) {
      checked = now;
      chain_.check_errors();  // throws with another rank's error
      const std::string lost = chain_.lost_neighbour();
      if (!lost.empty()) stall = "cannot complete: " + lost;
    }
    if (stall.empty() && now - t0 > timeout_s_)
      stall = "made no progress for " + cli::shortest(timeout_s_) +
              " s: a rank does not take part (stopped, or stuck)";
    if (!stall.empty()) {
      const std::string msg =
          "the ranks' " + what + " on rank " + std::to_string(chain_.rank()) + " " + stall;
      chain_.report_error(msg);
      LPSGD_THROW(msg);
    }
  }
}

void Control::run(std::unique_ptr<Inflight>& f, const std::string& what) {
  try {
    wait(*f, what);
  } catch (...) {
    std::lock_guard<std::mutex> lock(g_abandoned_mutex);
    abandoned_list().push_back(std::move(f));
    throw;
  }
}

void Control::allreduce(void* buf, int n, MPI_Datatype t, MPI_Op op, const std::string& what) {
  const size_t bytes = static_cast<size_t>(n) * type_bytes(t);
  auto f = std::make_unique<Inflight>();
  f->out.assign(static_cast<unsigned char*>(buf), static_cast<unsigned char*>(buf) + bytes);
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, f->out.data(), n, t, op, comm_, &f->req));
  run(f, what);
  std::memcpy(buf, f->out.data(), bytes);
}

void Control::allgather(const void* in, void* out, MPI_Datatype t, const std::string& what) {
  const size_t one = type_bytes(t);
  auto f = std::make_unique<Inflight>();
  f->in.assign(static_cast<const unsigned char*>(in), static_cast<const unsigned char*>(in) + one);
  f->out.resize(one * static_cast<size_t>(size_));
  MPI_CHECK(MPI_Iallgather(f->in.data(), 1, t, f->out.data(), 1, t, comm_, &f->req));
  run(f, what);
  std::memcpy(out, f->out.data(), f->out.size());
}

double Control::clock_offset(int rounds) {
  double offset = 0, best_rtt = 1e30;
  for (int r = 1; r < size_; ++r) {
    for (int i = 0; i < rounds; ++i) {
      if (rank_ == 0) {
        double theirs = 0;
        const double t0 = now_s();
        MPI_CHECK(MPI_Send(&t0, 1, MPI_DOUBLE, r, 0, comm_));
        MPI_CHECK(MPI_Recv(&theirs, 1, MPI_DOUBLE, r, 0, comm_, MPI_STATUS_IGNORE));
        const double t1 = now_s();
        // Tell r what its reading meant: its clock minus ours at the middle.
        double est[2] = {t1 - t0, theirs - 0.5 * (t0 + t1)};
        MPI_CHECK(MPI_Send(est, 2, MPI_DOUBLE, r, 1, comm_));
      } else if (rank_ == r) {
        double t0 = 0, est[2];
        MPI_CHECK(MPI_Recv(&t0, 1, MPI_DOUBLE, 0, 0, comm_, MPI_STATUS_IGNORE));
        const double mine = now_s();
        MPI_CHECK(MPI_Send(&mine, 1, MPI_DOUBLE, 0, 0, comm_));
        MPI_CHECK(MPI_Recv(est, 2, MPI_DOUBLE, 0, 1, comm_, MPI_STATUS_IGNORE));
        if (est[0] < best_rtt) {
          best_rtt = est[0];
          offset = est[1];
        }
      }
    }
  }
  return offset;
}

std::string Control::gather_text(const std::string& mine, int root) {
  int n = static_cast<int>(mine.size());
  std::vector<int> sizes(static_cast<size_t>(size_)), at(static_cast<size_t>(size_));
  MPI_CHECK(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, comm_));
  std::string all;
  if (rank_ == root) {
    size_t total = 0;
    for (int r = 0; r < size_; ++r) {
      at[static_cast<size_t>(r)] = static_cast<int>(total);
      total += static_cast<size_t>(sizes[static_cast<size_t>(r)]);
    }
    LPSGD_CHECK(total <= static_cast<size_t>(INT32_MAX), "gathered text of " << total << " bytes");
    all.resize(total);
  }
  MPI_CHECK(MPI_Gatherv(mine.data(), n, MPI_CHAR, all.data(), sizes.data(), at.data(), MPI_CHAR, root,
                        comm_));
  return all;
}

bool Control::share(Outcome o, int root) { return share_outcome(comm_, std::move(o), root); }

bool share_outcome(MPI_Comm comm, Outcome o, int root) {
  int head[2] = {o.code, static_cast<int>(o.message.size())};
  MPI_CHECK(MPI_Bcast(head, 2, MPI_INT, root, comm));
  o.message.resize(static_cast<size_t>(head[1]));
  MPI_CHECK(MPI_Bcast(o.message.data(), head[1], MPI_CHAR, root, comm));
  if (head[0] == Outcome::kUsage) LPSGD_USAGE_ERROR(o.message);
  if (head[0] == Outcome::kRuntime) LPSGD_THROW(o.message);
  return head[0] != Outcome::kWarned;
}

void Control::agree(const Outcome& o, const std::string& what) {
  if (size_ == 1) {
    if (o.code == Outcome::kUsage) LPSGD_USAGE_ERROR(o.message);
    if (o.code != Outcome::kOk) LPSGD_THROW(o.message);
    return;
  }
  int first = o.code != Outcome::kOk ? rank_ : size_;
  allreduce(&first, 1, MPI_INT, MPI_MIN, what);
  if (first == size_) return;
  Outcome mine = o;
  if (rank_ == first) mine.message += " (on rank " + std::to_string(first) + ")";
  share(mine, first);
}

}  // namespace lpsgd::train
