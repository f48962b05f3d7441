#include "comm/links/shm_link.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>

#include "comm/chain.hpp"
#include "core/error.hpp"

namespace lpsgd::comm {

namespace {
constexpr size_t kPage = 4096;
size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
// MPI_Win_allocate_shared aligns a rank's segment to 8 bytes only (Open MPI
// 4.1 puts it 0x108 into a page), and the control block's atomics want their
// own cache lines: every rank starts a segment at the next 64-byte boundary.
// Mappings are page-aligned, so all ranks find the same boundary.
constexpr size_t kLine = alignof(ShmControl);
char* line_aligned(void* p) {
  return reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(p), kLine));
}
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
  active_ = true;
  segment_bytes_ = kLine + round_up(sizeof(ShmControl), kPage) +
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
  auto* ctrl = new (line_aligned(base)) ShmControl;
  for (auto& dir : ctrl->ready)
    for (auto& f : dir) f.store(0, std::memory_order_relaxed);
  for (auto& c : ctrl->consumed) c.store(0, std::memory_order_relaxed);
  for (auto& dir : ctrl->where)
    for (auto& w : dir) w.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  MPI_CHECK(MPI_Barrier(chain.node_comm()));
}

ShmArena::~ShmArena() {
  // MPI_Win_free is collective: while an error unwinds this rank alone the
  // others never join it, so the window is left to the process exit (the
  // error path ends in MPI_Abort or exit right after).
  if (std::uncaught_exceptions() != 0) return;
  for (auto it = regions_.rbegin(); it != regions_.rend(); ++it) MPI_Win_free(&it->win);
  if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
}

void* ShmArena::alloc_region(size_t bytes) {
  if (!active_) return nullptr;
  Region r;
  r.bytes = bytes;
  MPI_Info info;
  MPI_CHECK(MPI_Info_create(&info));
  MPI_CHECK(MPI_Info_set(info, "alloc_shared_noncontig", "true"));
  void* base = nullptr;
  const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(round_up(std::max<size_t>(bytes, 1), kPage)),
                                         1, info, chain_.node_comm(), &base, &r.win);
  MPI_Info_free(&info);
  MPI_CHECK(rc);
  r.mine = static_cast<char*>(base);
  int n = 0;
  MPI_CHECK(MPI_Comm_size(chain_.node_comm(), &n));
  r.base.resize(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) {
    MPI_Aint size = 0;
    int disp = 0;
    void* b = nullptr;
    MPI_CHECK(MPI_Win_shared_query(r.win, q, &size, &disp, &b));
    r.base[static_cast<size_t>(q)] = static_cast<char*>(b);
  }
  regions_.push_back(std::move(r));
  return base;
}

bool ShmArena::locate(const void* p, size_t bytes, uint32_t& region, uint64_t& offset) const {
  const char* c = static_cast<const char*>(p);
  for (size_t i = 0; i < regions_.size(); ++i) {
    const Region& r = regions_[i];
    if (c >= r.mine && c + bytes <= r.mine + r.bytes) {
      region = static_cast<uint32_t>(i);
      offset = static_cast<uint64_t>(c - r.mine);
      return true;
    }
  }
  return false;
}

char* ShmArena::peer_address(int node_rank, uint32_t region, uint64_t offset) const {
  LPSGD_CHECK(region < regions_.size(), "shm link: the peer names shared region " << region
                                            << ", but only " << regions_.size() << " exist");
  return regions_[region].base[static_cast<size_t>(node_rank)] + offset;
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
  return line_aligned(base);
}

size_t ShmArena::slots_offset(int dir) const {
  return round_up(sizeof(ShmControl), kPage) +
         static_cast<size_t>(dir) * static_cast<size_t>(window_) * slot_bytes_;
}

ShmLink::ShmLink(Device& dev, ShmArena& arena, int my_pos, int peer, int dir, int window,
                 size_t slot_bytes)
    : Link(peer, window, slot_bytes), dev_(dev), arena_(arena),
      peer_node_rank_(node_rank_of(arena.chain(), peer)) {
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

namespace {
// A place in the node's shared regions as one word: (region + 1) << 48 | offset;
// 0 is "not shared".
constexpr uint64_t kOffsetMask = (uint64_t{1} << 48) - 1;
uint64_t encode(uint32_t region, uint64_t offset) { return (uint64_t{region} + 1) << 48 | offset; }
}  // namespace

uint64_t ShmLink::share(const void* p, size_t bytes) const {
  uint32_t region = 0;
  uint64_t offset = 0;
  return p && arena_.locate(p, bytes, region, offset) ? encode(region, offset) : 0;
}

char* ShmLink::peer_memory(uint64_t h) const {
  if (h == 0) return nullptr;
  return arena_.peer_address(peer_node_rank_, static_cast<uint32_t>((h >> 48) - 1), h & kOffsetMask);
}

void ShmLink::post_send(uint64_t seq, const void* src, size_t bytes) {
  void* dst = send_slot(seq);
  LPSGD_CHECK(bytes <= slot_bytes_, "shm link: block of " << bytes << " bytes exceeds slot");
  // A block in a shared region is read there by the peer; others are copied in.
  const uint64_t where = src != dst ? share(src, bytes) : 0;
  if (src != dst && where == 0) dev_.copy(dst, src, bytes);
  in_place_[slot(seq)] = where != 0;
  mine_->where[dir_out_][slot(seq)].store(where, std::memory_order_relaxed);
  mine_->ready[dir_out_][slot(seq)].store(seq + 1, std::memory_order_release);
}

bool ShmLink::send_done(uint64_t seq) {
  // A copy into the slot is done at once; a block read in place only once
  // the peer has consumed it. (If the slot has been reused since, seq was
  // consumed before that.)
  return !in_place_[slot(seq)] ||
         theirs_->consumed[dir_in_].load(std::memory_order_acquire) > seq;
}

const void* ShmLink::test_recv(uint64_t seq) {
  const uint64_t v = theirs_->ready[dir_in_][slot(seq)].load(std::memory_order_acquire);
  if (v != seq + 1) return nullptr;
  const uint64_t where = theirs_->where[dir_in_][slot(seq)].load(std::memory_order_relaxed);
  return where == 0 ? in_slots_ + slot(seq) * slot_bytes_ : peer_memory(where);
}

void ShmLink::release_recv(uint64_t seq) {
  Link::release_recv(seq);
  mine_->consumed[dir_out_].store(seq + 1, std::memory_order_release);
}

}  // namespace lpsgd::comm
