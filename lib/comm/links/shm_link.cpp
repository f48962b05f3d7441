#include "comm/links/shm_link.hpp"

#include <cstring>
#include <exception>
#include <new>

#include "comm/chain.hpp"
#include "core/error.hpp"

namespace lpsgd::comm {

namespace {
constexpr size_t kPage = 4096;
size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
}  // namespace

ShmArena::ShmArena(const Chain& chain, int window, size_t slot_bytes, bool needed)
    : chain_(chain), slot_bytes_(slot_bytes), window_(window) {
  LPSGD_CHECK(window >= 1 && window <= ShmControl::kMaxWindow,
              "window must be in [1, " << ShmControl::kMaxWindow << "], got " << window);
  // Every rank of the real node takes part; a rank without peer links still
  // gets a (small) segment so that the call stays collective.
  int any = needed ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, chain.node_comm()));
  if (!any) return;
  segment_bytes_ = round_up(sizeof(ShmControl), kPage) +
                   (needed ? 2 * static_cast<size_t>(window) * slot_bytes : 0);
  void* base = nullptr;
  MPI_Info info;
  MPI_CHECK(MPI_Info_create(&info));
  MPI_CHECK(MPI_Info_set(info, "alloc_shared_noncontig", "true"));
  MPI_CHECK(MPI_Win_allocate_shared(static_cast<MPI_Aint>(segment_bytes_), 1, info,
                                    chain.node_comm(), &base, &win_));
  MPI_Info_free(&info);
  // Touch everything now (no page faults inside collectives), then start the
  // flags at zero: nothing published, nothing consumed.
  std::memset(base, 0, segment_bytes_);
  auto* ctrl = new (base) ShmControl;
  for (auto& dir : ctrl->ready)
    for (auto& f : dir) f.store(0, std::memory_order_relaxed);
  for (auto& c : ctrl->consumed) c.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  MPI_CHECK(MPI_Barrier(chain.node_comm()));
}

ShmArena::~ShmArena() {
  // MPI_Win_free is collective: while an error unwinds this rank alone the
  // others never join it, so the window is left to the process exit (the
  // error path ends in MPI_Abort or exit right after).
  if (win_ != MPI_WIN_NULL && std::uncaught_exceptions() == 0) MPI_Win_free(&win_);
}

int node_rank_of(const Chain& chain, int chain_pos) {
  MPI_Group chain_group, node_group;
  MPI_CHECK(MPI_Comm_group(chain.comm(), &chain_group));
  MPI_CHECK(MPI_Comm_group(chain.node_comm(), &node_group));
  int node_rank = MPI_UNDEFINED;
  MPI_CHECK(MPI_Group_translate_ranks(chain_group, 1, &chain_pos, node_group, &node_rank));
  MPI_Group_free(&chain_group);
  MPI_Group_free(&node_group);
  LPSGD_CHECK(node_rank != MPI_UNDEFINED, "chain position " << chain_pos << " is not on my node");
  return node_rank;
}

char* ShmArena::segment(int chain_pos) const {
  LPSGD_CHECK(win_ != MPI_WIN_NULL, "shared-memory window not allocated");
  const int node_rank = node_rank_of(chain_, chain_pos);
  MPI_Aint size = 0;
  int disp = 0;
  void* base = nullptr;
  MPI_CHECK(MPI_Win_shared_query(win_, node_rank, &size, &disp, &base));
  return static_cast<char*>(base);
}

size_t ShmArena::slots_offset(int dir) const {
  return round_up(sizeof(ShmControl), kPage) +
         static_cast<size_t>(dir) * static_cast<size_t>(window_) * slot_bytes_;
}

ShmLink::ShmLink(Device& dev, ShmArena& arena, int my_pos, int peer, int dir, int window,
                 size_t slot_bytes)
    : Link(peer, window, slot_bytes), dev_(dev) {
  LPSGD_CHECK(dev.kind() == DeviceKind::Cpu, "shared-memory links carry host memory only");
  char* my_seg = arena.segment(my_pos);
  char* peer_seg = arena.segment(peer);
  mine_ = reinterpret_cast<ShmControl*>(my_seg);
  theirs_ = reinterpret_cast<ShmControl*>(peer_seg);
  dir_out_ = dir;
  dir_in_ = dir == ShmArena::kToLeft ? ShmArena::kToRight : ShmArena::kToLeft;
  out_slots_ = my_seg + arena.slots_offset(dir_out_);
  in_slots_ = peer_seg + arena.slots_offset(dir_in_);
}

bool ShmLink::can_send(uint64_t seq) {
  // Block seq reuses the slot of block seq - W: the peer must have consumed it.
  const uint64_t consumed = theirs_->consumed[dir_in_].load(std::memory_order_acquire);
  return seq < consumed + static_cast<uint64_t>(window_);
}

void* ShmLink::send_slot(uint64_t seq) { return out_slots_ + slot(seq) * slot_bytes_; }

void ShmLink::post_send(uint64_t seq, const void* src, size_t bytes) {
  void* dst = send_slot(seq);
  LPSGD_CHECK(bytes <= slot_bytes_, "shm link: block of " << bytes << " bytes exceeds slot");
  if (src != dst) dev_.copy(dst, src, bytes);
  mine_->ready[dir_out_][slot(seq)].store(seq + 1, std::memory_order_release);
}

const void* ShmLink::test_recv(uint64_t seq) {
  const uint64_t v = theirs_->ready[dir_in_][slot(seq)].load(std::memory_order_acquire);
  return v == seq + 1 ? in_slots_ + slot(seq) * slot_bytes_ : nullptr;
}

void ShmLink::release_recv(uint64_t seq) {
  Link::release_recv(seq);
  mine_->consumed[dir_out_].store(seq + 1, std::memory_order_release);
}

}  // namespace lpsgd::comm
