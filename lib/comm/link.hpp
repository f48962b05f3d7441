// Link: one neighbour of the chain, seen from this rank. Collectives are written
// only against this interface (and Device kernels), so the same LP code runs over
// MPI, shared memory and, later, CUDA IPC.
//
// Each direction carries numbered blocks (seq = 0, 1, 2, ... over the life of the
// link) through W slots of slot_bytes each, so at most W blocks are in flight per
// direction and memory stays bounded at W·slot_bytes. Both sides count blocks the
// same way because every rank runs the same collectives in the same order.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/types.hpp"

namespace lpsgd::comm {

class Link {
 public:
  virtual ~Link() = default;
  virtual LinkKind kind() const = 0;
  /// Chain position of the neighbour.
  int peer() const { return peer_; }
  int window() const { return window_; }
  size_t slot_bytes() const { return slot_bytes_; }

  // ---- sending: this rank -> peer ------------------------------------------
  /// True when block seq may be composed and sent (its slot is free again).
  virtual bool can_send(uint64_t seq) = 0;
  /// Memory where block seq can be composed so that sending it costs no copy:
  /// the shared slot itself (shm) or a private staging slot (MPI).
  virtual void* send_slot(uint64_t seq) = 0;
  /// Sends `bytes` from `src`: send_slot(seq) or any memory left unchanged until
  /// send_done(seq).
  virtual void post_send(uint64_t seq, const void* src, size_t bytes) = 0;
  virtual bool send_done(uint64_t seq) = 0;

  // ---- receiving: peer -> this rank ------------------------------------------
  /// True when block seq may be posted (block seq - W has been released).
  bool can_recv(uint64_t seq) const { return seq < released_ + static_cast<uint64_t>(window_); }
  /// Expects block seq of `bytes`. `dst`, if given, is where the caller wants the
  /// data; links that can deliver there do (MPI), others ignore it (shm).
  virtual void post_recv(uint64_t seq, size_t bytes, void* dst) = 0;
  /// The block's data once it has arrived, else nullptr (also when seq has not
  /// been posted yet). Valid until release.
  virtual const void* test_recv(uint64_t seq) = 0;
  /// The caller is done with block seq (blocks are released in order).
  virtual void release_recv(uint64_t seq) {
    if (seq != released_) out_of_order(seq);
    released_ = seq + 1;
  }

  /// Memory both ends can address (peer links: buffers from
  /// Communicator::alloc_shared): a handle for [p, p + bytes) that the peer
  /// turns into its own address with peer_memory; 0 where the link has none.
  virtual uint64_t share(const void* p, size_t bytes) const {
    (void)p;
    (void)bytes;
    return 0;
  }
  /// Where the peer's memory of handle h (its share()) lies in my address space.
  virtual char* peer_memory(uint64_t h) const {
    (void)h;
    return nullptr;
  }

  /// Adds the MPI requests still in flight (links over MPI), so an idle wait
  /// can block on them (the SimGrid build) instead of polling.
  virtual void pending_requests(std::vector<MPI_Request*>& out) { (void)out; }

  /// Blocks sent / received over the link's life; collectives number their
  /// blocks from these and advance them when they finish.
  uint64_t tx_base() const { return tx_base_; }
  uint64_t rx_base() const { return rx_base_; }
  void advance(uint64_t tx_blocks, uint64_t rx_blocks) {
    tx_base_ += tx_blocks;
    rx_base_ += rx_blocks;
  }

 protected:
  [[noreturn]] void out_of_order(uint64_t seq) const;
  Link(int peer, int window, size_t slot_bytes)
      : peer_(peer), window_(window), slot_bytes_(slot_bytes) {}
  int peer_;
  int window_;
  size_t slot_bytes_;
  uint64_t released_ = 0;
  uint64_t tx_base_ = 0, rx_base_ = 0;
};

}  // namespace lpsgd::comm
