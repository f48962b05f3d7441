#include "comm/collectives/schedule.hpp"

#include <climits>
#include <sstream>

#include "comm/communicator.hpp"
#include "comm/requests.hpp"
#include "core/error.hpp"

namespace lpsgd::comm {

namespace {
constexpr int kTag = 7;
}

void Schedule::exchange(int send_peer, Region s, int recv_peer, Region r,
                        std::vector<LocalOp> after) {
  Step& st = next();
  if (s.len) st.sends.push_back({send_peer, s});
  if (r.len) st.recvs.push_back({recv_peer, r});
  for (auto& op : after)
    if (op.dst.len) st.after.push_back(op);
}

ScheduleCollective::ScheduleCollective(Communicator& c, const CollArgs& a, Algo algo,
                                       Schedule schedule)
    : Collective(c, a, algo, 0), sched_(std::move(schedule)), esize_(dtype_size(a.dtype)) {
  const size_t bytes = a.count * esize_;
  LPSGD_CHECK(bytes <= static_cast<size_t>(INT_MAX),
              algo_name(algo) << " handles messages below 2 GiB; got " << bytes << " bytes");
  base_[static_cast<int>(Buf::In)] = const_cast<char*>(static_cast<const char*>(a.in ? a.in : a.out));
  base_[static_cast<int>(Buf::Out)] = static_cast<char*>(a.out);
  // Scratch buffers grow once to the largest message (reserve_scratch() grows them up front).
  bool uses[4] = {false, false, false, false};
  for (const Step& s : sched_.steps) {
    for (const Xfer& x : s.sends) uses[static_cast<int>(x.r.buf)] = true;
    for (const Xfer& x : s.recvs) uses[static_cast<int>(x.r.buf)] = true;
    for (const LocalOp& op : s.after) {
      uses[static_cast<int>(op.dst.buf)] = uses[static_cast<int>(op.a.buf)] = true;
      if (op.kind == LocalOp::Add) uses[static_cast<int>(op.b.buf)] = true;
    }
  }
  if (uses[static_cast<int>(Buf::ScratchA)]) base_[2] = static_cast<char*>(c.scratch(0, bytes));
  if (uses[static_cast<int>(Buf::ScratchB)]) base_[3] = static_cast<char*>(c.scratch(1, bytes));
  if (c.stages_through_host())
    for (int b = 0; b < 4; ++b)
      if (uses[b]) host_[b] = static_cast<char*>(c.host_stage(b, bytes));
}

char* ScheduleCollective::ptr(const Region& r) const {
  return base_[static_cast<int>(r.buf)] + r.off * esize_;
}

char* ScheduleCollective::host(const Region& r) const {
  return host_[static_cast<int>(r.buf)] + r.off * esize_;
}

void ScheduleCollective::post(const Step& s) {
  MPI_Comm comm = comm_.p2p_comm();
  Device& dev = comm_.device();
  const bool stage = comm_.stages_through_host();
  // MPI touches the memory outside the device's queue: what the queue wrote
  // (earlier local ops) must be there, and nothing queued may still read a
  // region about to be received into. Staged, copy_to_host waits the same way.
  if (!stage && dev.kind() != DeviceKind::Cpu && !(s.sends.empty() && s.recvs.empty()))
    dev.synchronize();
  // Every region as messages of at most the communicator's MPI message size,
  // as LP's links send their blocks (comm/requests.hpp, post_sends).
  const auto split = [&](const Xfer& x) {
    return transfer_message_bytes(comm_.mpi_message_bytes(), x.r.len * esize_);
  };
  size_t n = 0;
  for (const auto* xs : {&s.recvs, &s.sends})
    for (const Xfer& x : *xs) n += message_count(x.r.len * esize_, split(x));
  reqs_.assign(n, MPI_REQUEST_NULL);
  size_t i = 0;
  for (const Xfer& x : s.recvs) {
    const size_t bytes = x.r.len * esize_;
    post_recvs(stage ? host(x.r) : ptr(x.r), bytes, split(x), x.peer, kTag, comm, &reqs_[i]);
    i += message_count(bytes, split(x));
  }
  for (const Xfer& x : s.sends) {
    const size_t bytes = x.r.len * esize_;
    if (stage) dev.copy_to_host(host(x.r), ptr(x.r), bytes);
    post_sends(stage ? host(x.r) : ptr(x.r), bytes, split(x), x.peer, kTag, comm,
               /*sync_last=*/false, &reqs_[i]);
    i += message_count(bytes, split(x));
  }
}

void ScheduleCollective::run_local(const Step& s) {
  Device& dev = comm_.device();
  for (const LocalOp& op : s.after) {
    switch (op.kind) {
      case LocalOp::Add:
        dev.reduce_add(args_.dtype, ptr(op.dst), ptr(op.a), ptr(op.b), op.dst.len);
        break;
      case LocalOp::Copy:
        dev.copy(ptr(op.dst), ptr(op.a), op.dst.len * esize_);
        break;
      case LocalOp::Scale:
        dev.scale(args_.dtype, ptr(op.dst), op.alpha, op.dst.len);
        break;
    }
  }
}

bool ScheduleCollective::on_progress(bool& moved) {
  while (cur_ < sched_.steps.size()) {
    const Step& s = sched_.steps[cur_];
    if (!posted_) {
      post(s);
      posted_ = true;
      moved = true;
    }
    if (!test_all(reqs_.data(), reqs_.size())) return false;
    if (comm_.stages_through_host())
      for (const Xfer& x : s.recvs) comm_.device().copy_from_host(ptr(x.r), host(x.r), x.r.len * esize_);
    run_local(s);
    ++cur_;
    posted_ = false;
    moved = true;
  }
  return true;
}

void ScheduleCollective::pending_requests(std::vector<MPI_Request*>& out) {
  for (auto& r : reqs_)
    if (r != MPI_REQUEST_NULL) out.push_back(&r);
}

std::string ScheduleCollective::waiting_for() const {
  std::ostringstream os;
  if (cur_ >= sched_.steps.size()) return "nothing";
  const Step& s = sched_.steps[cur_];
  os << "round " << cur_ << " of " << sched_.steps.size() << ":";
  for (const Xfer& x : s.recvs) os << " receive of " << x.r.len << " elements from rank " << x.peer;
  for (const Xfer& x : s.sends) os << " send of " << x.r.len << " elements to rank " << x.peer;
  return os.str();
}

}  // namespace lpsgd::comm
