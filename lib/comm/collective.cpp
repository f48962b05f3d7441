#include "comm/collective.hpp"

#include <sstream>
#include <thread>

#include "comm/communicator.hpp"
#include "comm/progress_engine.hpp"
#include "comm/requests.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"

namespace lpsgd::comm {

namespace {
constexpr int kTagHeaderFromLeft = 11;   // sent rightwards
constexpr int kTagHeaderFromRight = 12;  // sent leftwards
}  // namespace

Collective::Collective(Communicator& comm, const CollArgs& args, Algo algo, size_t block_bytes)
    : comm_(comm), args_(args), algo_(algo), block_bytes_(block_bytes) {
  sig_.kind = static_cast<uint8_t>(args.kind);
  sig_.algo = static_cast<uint8_t>(algo);
  sig_.dtype = static_cast<uint8_t>(args.dtype);
  sig_.op = static_cast<uint8_t>(args.op);
  sig_.in_float = args.in_float ? 1 : 0;
  sig_.root = args.kind == CollKind::Allreduce ? 0 : args.root;
  sig_.count = args.count;
  sig_.block_bytes = block_bytes;
}

static_assert(sizeof(Signature) <= 1024, "signatures must stay far below MPI's eager limits");

Collective::~Collective() {
  // Destroyed while a progress engine may still drive it (its owner is
  // unwinding an error): take it from the engine before anything is freed.
  bool held = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    held = engine_ != nullptr && !engine_done_;
  }
  if (held) engine_->withdraw(this);
  comm_.release(this);
  // Signatures are far below every MPI library's eager limit: a signature
  // receive that has matched has its bytes already, and a send's were copied
  // when it was posted, so a request end_requests() has to leave in flight
  // touches this object no more.
  const double deadline = release_deadline();
  end_receives(&hdr_req_[0], 1, deadline);
  end_receives(&hdr_req_[2], 1, deadline);
  end_sends(&hdr_req_[1], 1, deadline);
  end_sends(&hdr_req_[3], 1, deadline);
}

std::string Collective::describe() const { return sig_.describe(); }

void Collective::start() {
  LPSGD_CHECK(state_.load() == kIdle, "collective " << describe() << " started twice");
  comm_.check_errors();
  const Chain& ch = comm_.chain();
  if (args_.kind != CollKind::Allreduce && (args_.root < 0 || args_.root >= ch.size()))
    fail("root " + std::to_string(args_.root) + " is outside the chain of " +
         std::to_string(ch.size()) + " ranks");
  // Tickets are handed out in start order, which every rank shares; the
  // collective moves data only when its ticket is up (see Communicator::acquire).
  sig_.serial = ticket_ = comm_.take_ticket();
  MPI_Comm c = comm_.ctrl_comm();
  const int bytes = static_cast<int>(sizeof(Signature));
  if (ch.has_left()) {
    MPI_CHECK(MPI_Irecv(&peer_sig_[0], bytes, MPI_BYTE, ch.pos() - 1, kTagHeaderFromLeft, c, &hdr_req_[0]));
    MPI_CHECK(MPI_Isend(&sig_, bytes, MPI_BYTE, ch.pos() - 1, kTagHeaderFromRight, c, &hdr_req_[1]));
  }
  if (ch.has_right()) {
    MPI_CHECK(MPI_Irecv(&peer_sig_[1], bytes, MPI_BYTE, ch.pos() + 1, kTagHeaderFromRight, c, &hdr_req_[2]));
    MPI_CHECK(MPI_Isend(&sig_, bytes, MPI_BYTE, ch.pos() + 1, kTagHeaderFromLeft, c, &hdr_req_[3]));
  }
  last_move_s_ = now_s();
  state_.store(kHeaders, std::memory_order_release);
}

bool Collective::step() {
  const int s = state_.load(std::memory_order_acquire);
  if (s == kDone) return true;
  LPSGD_CHECK(s != kIdle, "collective " << describe() << " progressed before start()");
  LPSGD_CHECK(s != kFailed, "collective " << describe() << " already failed");
  comm_.check_errors();
  if (s == kHeaders) {
    if (!test_all(hdr_req_, 4)) return false;
    const Chain& ch = comm_.chain();
    for (int side = 0; side < 2; ++side) {
      const bool present = side == 0 ? ch.has_left() : ch.has_right();
      if (present && !(peer_sig_[side] == sig_)) {
        const int peer = ch.pos() + (side == 0 ? -1 : 1);
        std::ostringstream os;
        os << "collective mismatch between ranks: rank " << ch.pos() << " called "
           << sig_.describe() << " but rank " << peer << " called "
           << peer_sig_[side].describe()
           << " (every rank must make the same collective calls, in the same order)";
        fail(os.str());
      }
    }
    // Collectives of one communicator move data one at a time, in order.
    if (!comm_.acquire(this)) return false;
    state_.store(kRunning, std::memory_order_release);
    last_move_s_ = running_s_ = now_s();
    on_start();
  }
  bool moved = false;
  const bool finished = on_progress(moved);
  if (moved) last_move_s_ = now_s();
  if (finished) {
    comm_.release(this);
    done_s_ = now_s();
    state_.store(kDone, std::memory_order_release);
  }
  return finished;
}

bool Collective::progress() {
  try {
    return step();
  } catch (const Error& e) {
    if (state_.load() != kFailed) {
      state_.store(kFailed);
      comm_.release(this);
      comm_.report_error(e.message());
    }
    throw;
  }
}

void Collective::fail(const std::string& message) {
  state_.store(kFailed);
  comm_.release(this);
  comm_.report_error(message);
  LPSGD_THROW(message);
}

void Collective::check_stall(double timeout_s) {
  if (timeout_s < 0) timeout_s = comm_.options().timeout_s;
  const double now = now_s();
  // Stalled for a second: a neighbour on this machine that has ended (killed,
  // crashed) is named now, not after the timeout. Twice a second at most.
  if (now - last_move_s_ > 1.0 && now - last_peer_check_s_ > 0.5) {
    last_peer_check_s_ = now;
    const std::string lost = comm_.lost_neighbour();
    if (!lost.empty())
      fail("collective " + describe() + " cannot complete on rank " +
           std::to_string(comm_.chain().pos()) + ": " + lost);
  }
  if (now - last_move_s_ <= timeout_s) return;
  std::ostringstream os;
  os << "collective " << describe() << " made no progress for " << timeout_s
     << " s on rank " << comm_.chain().pos() << ": ";
  if (state_.load() == kHeaders) {
    // A receive still posted is a neighbour that has not called it (yet).
    const Chain& ch = comm_.chain();
    std::string who;
    if (hdr_req_[0] != MPI_REQUEST_NULL)
      who = "rank " + std::to_string(ch.pos() - 1) + " (left neighbour)";
    if (hdr_req_[2] != MPI_REQUEST_NULL)
      who += (who.empty() ? "" : " and ") + ("rank " + std::to_string(ch.pos() + 1) + " (right neighbour)");
    os << "waiting for " << (who.empty() ? "a neighbour" : who)
       << " to call the same collective, before block 0 (signature exchange)";
  } else {
    os << "waiting for " << waiting_for();
  }
  fail(os.str());
}

void Collective::wait(double timeout_s) {
  if (engine_) {
    // Wait for the engine to let go of this collective, not just for its state:
    // the caller may destroy it as soon as wait() returns.
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return engine_done_; });
    if (error_) std::rethrow_exception(error_);
    return;
  }
  if (state_.load() == kIdle) start();
  int idle = 0;
  while (!progress()) {
    check_stall(timeout_s);
#ifdef SMPI_SHARED_MALLOC
    (void)idle;
    block_until_a_request_completes();
#else
    if (++idle > 1000) std::this_thread::yield();  // oversubscribed ranks share cores
#endif
  }
}

// Under SimGrid SMPI a rank that polls never lets simulated time advance (with
// smpi/test:0 a failed MPI_Test costs nothing; with a positive cost, polling
// adds that cost to every block). progress() returns only when nothing more can
// move without a message completing, so the rank blocks until one of the
// requests it waits on does: no polling, no added time. Waitany frees the
// request it completes and leaves MPI_REQUEST_NULL, which test_request() reads
// as complete; under SMPI that is the only way requests complete
// (comm/requests.hpp says why).
void Collective::block_until_a_request_completes() {
  std::vector<MPI_Request*> pending;
  for (auto& r : hdr_req_)
    if (r != MPI_REQUEST_NULL) pending.push_back(&r);
  comm_.pending_requests(pending);
  pending_requests(pending);
  if (pending.empty())
    fail("collective " + describe() + " is idle with nothing in flight on rank " +
         std::to_string(comm_.chain().pos()) + ": waiting for " + waiting_for());
  std::vector<MPI_Request> reqs;
  reqs.reserve(pending.size());
  for (MPI_Request* r : pending) reqs.push_back(*r);
  int index = MPI_UNDEFINED;
  MPI_CHECK(MPI_Waitany(static_cast<int>(reqs.size()), reqs.data(), &index, MPI_STATUS_IGNORE));
  if (index != MPI_UNDEFINED) *pending[static_cast<size_t>(index)] = MPI_REQUEST_NULL;
}

void Collective::finish_engine(std::exception_ptr error) {
  // Notify under the lock: once the waiter sees engine_done_ it may free *this.
  std::lock_guard<std::mutex> lock(mutex_);
  error_ = error;
  if (error && state_.load() < kDone) state_.store(kFailed);
  engine_done_ = true;
  cv_.notify_all();
}

}  // namespace lpsgd::comm
