// ShmLink: a chain neighbour on the same node, through an MPI-3 shared-memory
// window. The sender composes block seq directly in its own slot and publishes
// it with a release store of seq+1 in the slot's flag; the receiver reads the
// slot in place (so a reduce step is one pass `mine + theirs` into its own
// outgoing slot) and acknowledges by storing the number of blocks it consumed.
//
// Zero copy: a block that already sits in a shared region (memory from
// Communicator::alloc_shared, e.g. the trainer's gradients, the bench's
// buffers) is not copied into the slot at all. The sender publishes where it
// is, the receiver reads it there, and the send is done only once the
// receiver has consumed it.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/link.hpp"
#include "device/device.hpp"

namespace lpsgd::comm {

class Chain;

/// Flags of one rank, at the start of its segment of the shared window.
struct ShmControl {
  static constexpr int kMaxWindow = 16;
  alignas(64) std::atomic<uint64_t> ready[2][kMaxWindow];  // [dir][slot]: seq+1 published
  alignas(64) std::atomic<uint64_t> consumed[2];           // [dir]: blocks read from that side
  // [dir][slot]: 0 = the data is in the slot; else (region + 1) << 48 | offset.
  alignas(64) std::atomic<uint64_t> where[2][kMaxWindow];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shm links need lock-free atomics");

/// Rank in chain.node_comm() of chain position `chain_pos`, which must be on
/// this rank's real node.
int node_rank_of(const Chain& chain, int chain_pos);

/// The node's shared window: one segment per rank with its control block and
/// W slots towards each neighbour. Created collectively over the node's ranks.
class ShmArena {
 public:
  ShmArena(const Chain& chain, int window, size_t slot_bytes, bool needed);
  ~ShmArena();
  ShmArena(const ShmArena&) = delete;
  ShmArena& operator=(const ShmArena&) = delete;
  /// Segment of chain position p (must share my node).
  char* segment(int chain_pos) const;
  static constexpr int kToLeft = 0, kToRight = 1;
  size_t slots_offset(int dir) const;

  /// `bytes` of memory that the node's peer links read in place; collective
  /// over the node's ranks (same calls, same order; sizes may differ). Lives
  /// as long as the arena. nullptr when no rank of the node has a peer link.
  void* alloc_region(size_t bytes);
  /// Finds [p, p + bytes) in one of my regions: its number and offset.
  bool locate(const void* p, size_t bytes, uint32_t& region, uint64_t& offset) const;
  /// Where node rank `node_rank` has its region's offset, in my mapping.
  char* peer_address(int node_rank, uint32_t region, uint64_t offset) const;
  const Chain& chain() const { return chain_; }

 private:
  struct Region {
    MPI_Win win = MPI_WIN_NULL;
    char* mine = nullptr;
    size_t bytes = 0;
    std::vector<char*> base;  // per node rank, in my address space
  };
  const Chain& chain_;
  bool active_ = false;
  std::vector<Region> regions_;
  MPI_Win win_ = MPI_WIN_NULL;
  size_t segment_bytes_ = 0;
  size_t slot_bytes_ = 0;
  int window_ = 0;
};

class ShmLink final : public Link {
 public:
  /// dir: ShmArena::kToLeft if the peer is my left neighbour, else kToRight.
  ShmLink(Device& dev, ShmArena& arena, int my_pos, int peer, int dir, int window,
          size_t slot_bytes);
  LinkKind kind() const override { return LinkKind::Shm; }

  bool can_send(uint64_t seq) override;
  void* send_slot(uint64_t seq) override;
  void post_send(uint64_t seq, const void* src, size_t bytes) override;
  bool send_done(uint64_t seq) override;
  void post_recv(uint64_t, size_t, void*) override {}
  const void* test_recv(uint64_t seq) override;
  void release_recv(uint64_t seq) override;
  uint64_t share(const void* p, size_t bytes) const override;
  char* peer_memory(uint64_t h) const override;

 private:
  size_t slot(uint64_t seq) const { return static_cast<size_t>(seq % static_cast<uint64_t>(window_)); }
  Device& dev_;
  ShmArena& arena_;
  int peer_node_rank_;
  bool in_place_[ShmControl::kMaxWindow] = {};  // per slot: the last block sent was zero-copy
  ShmControl* mine_;
  ShmControl* theirs_;
  int dir_out_;   // my direction towards the peer
  int dir_in_;    // the peer's direction towards me
  char* out_slots_;
  const char* in_slots_;
};

}  // namespace lpsgd::comm
