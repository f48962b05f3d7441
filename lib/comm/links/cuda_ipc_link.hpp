// CudaIpcLink: a chain neighbour on the same node when blocks live on GPUs.
//
// Every rank exports its receive slots (device memory, W per direction) with
// cudaIpcGetMemHandle; each neighbour maps them (cudaIpcOpenMemHandle), so the
// sender writes a block straight into the receiver's slot: LP's reduce step
// "outer partial + mine" is one kernel whose output is the neighbour's slot,
// and a forwarded block is one copy on the sender's queue. The receiver reads
// its slot in place.
//
// Completion crosses processes through the flags of the node's shared window
// (ShmControl, as for ShmLink), which every rank registers as mapped host
// memory: the GPU itself stores "block seq ready" after the write and "slot
// free" after the reader, in stream order (kernels/cuda/signal.cuh). No host
// thread waits for the GPU; hosts only poll the neighbour's flags.
//
// Several ranks may share one GPU (IPC works within a device), or use
// different GPUs of the node that can access each other (peer access).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/link.hpp"
#include "comm/links/shm_link.hpp"
#include "device/device.hpp"

namespace lpsgd::comm {

class Chain;

/// The node's part of the CUDA peer links: the flag window, this rank's
/// exported receive slots and every node rank's handle. Collective over the
/// real node's ranks (like ShmArena); `needed`: this rank has a peer link.
class CudaIpcArena {
 public:
  CudaIpcArena(const Chain& chain, Device& dev, int window, size_t slot_bytes, bool needed);
  ~CudaIpcArena();
  CudaIpcArena(const CudaIpcArena&) = delete;
  CudaIpcArena& operator=(const CudaIpcArena&) = delete;

  /// Host view of the flags of chain position p (on my node).
  ShmControl* control(int chain_pos) const;
  /// Device address of my own flags (the GPU writes them).
  ShmControl* my_control_on_device() const { return my_ctrl_dev_; }
  /// My receive slots for blocks from the left (side 0) or right (side 1) neighbour.
  char* recv_slots(int side) const;
  /// Maps the receive slots of chain position p (both sides) into this
  /// process; the caller closes the mapping with cudaIpcCloseMemHandle.
  char* open_recv_slots(int chain_pos) const;
  int window() const { return window_; }
  size_t slot_bytes() const { return slot_bytes_; }

 private:
  struct Export;
  const Chain& chain_;
  Device& dev_;
  int window_;
  size_t slot_bytes_;
  ShmArena flags_;
  void* recv_ = nullptr;  // 2 sides x W slots, cudaMalloc'd (IPC needs the allocation's base)
  ShmControl* my_ctrl_host_ = nullptr;
  ShmControl* my_ctrl_dev_ = nullptr;
  void* registered_ = nullptr;  // page-aligned start of the cudaHostRegister'ed range
  std::vector<unsigned char> exports_;  // every node rank's Export, by node rank
};

class CudaIpcLink final : public Link {
 public:
  /// dir: ShmArena::kToLeft if the peer is my left neighbour, else kToRight.
  CudaIpcLink(Device& dev, CudaIpcArena& arena, int my_pos, int peer, int dir);
  ~CudaIpcLink() override;
  LinkKind kind() const override { return LinkKind::Shm; }  // a peer link

  bool can_send(uint64_t seq) override;
  /// The receiver's slot itself, in its memory.
  void* send_slot(uint64_t seq) override;
  /// Copies src into the receiver's slot unless it is that slot, then flags
  /// it ready; both queued on the device.
  void post_send(uint64_t seq, const void* src, size_t bytes) override;
  /// Queued work: anything queued on this device later runs after the copy.
  bool send_done(uint64_t) override { return true; }
  void post_recv(uint64_t, size_t, void*) override {}
  const void* test_recv(uint64_t seq) override;
  /// Flags the slot free once the work queued so far (its readers) has run.
  void release_recv(uint64_t seq) override;

 private:
  size_t slot(uint64_t seq) const { return static_cast<size_t>(seq % static_cast<uint64_t>(window_)); }
  /// The device address of one of my flags.
  uint64_t* on_device(const std::atomic<uint64_t>& my_flag) const;
  Device& dev_;
  ShmControl* mine_host_ = nullptr;  // host view of my flags (for addresses only)
  ShmControl* mine_dev_ = nullptr;   // device address of my flags
  ShmControl* theirs_ = nullptr;     // host view of the peer's flags
  int dir_out_ = 0, dir_in_ = 0;
  char* peer_base_ = nullptr;        // the peer's receive slots, mapped
  char* out_slots_ = nullptr;        // ... the side that holds my blocks
  char* in_slots_ = nullptr;         // my receive slots for the peer's blocks
};

}  // namespace lpsgd::comm
