// DeviceMpiLink: a chain neighbour reached over MPI when blocks live in device
// (GPU) memory. Device work is queued, so a block may be handed to MPI only
// once the queue has produced it: each send records an event and is posted to
// MPI when the event has passed, in block order. Receives likewise: a block
// may land only once the queued work that still reads its target (or, staged,
// still copies the host slot's previous block out) is done, so each receive
// records an event and is posted when it has passed, in block order. The
// caller's thread never blocks on the device.
//
//  - direct (the MPI library is CUDA-aware): MPI reads and writes device memory.
//  - staged (it is not): a send is copied device -> pinned host slot on the
//    device's queue and sent from there; a receive lands in a pinned host slot
//    and is copied host -> device on the queue. With W slots per direction the
//    copy of one block overlaps the transfer of the previous ones.
//
// Written against Device only (events, pinned memory, queued copies), so on the
// CPU it runs too — which is how the staging logic is tested without a GPU.
#pragma once

#include <mpi.h>

#include <deque>
#include <memory>
#include <vector>

#include "comm/link.hpp"
#include "device/device.hpp"

namespace lpsgd::comm {

/// Whether MPI may be given this device's memory: always for the CPU; for a
/// GPU when the MPI library says at run time that it is CUDA-aware (Open MPI's
/// MPIX_Query_cuda_support; other libraries count as not CUDA-aware).
/// LPSGD_MPI_CUDA_AWARE=0|1 overrides the answer for GPUs.
bool mpi_accepts_device_memory(const Device& dev);

class DeviceMpiLink final : public Link {
 public:
  /// tag_out / tag_in tell the two directions apart on `comm`; staged: copy
  /// blocks through pinned host slots instead of giving MPI device pointers.
  /// A block travels as messages of at most max_message bytes, as MpiLink's.
  DeviceMpiLink(Device& dev, MPI_Comm comm, int peer, int window, size_t slot_bytes,
                size_t max_message, int tag_out, int tag_in, bool staged);
  ~DeviceMpiLink() override;
  LinkKind kind() const override { return LinkKind::Mpi; }
  bool staged() const { return staged_; }

  bool can_send(uint64_t seq) override;
  void* send_slot(uint64_t seq) override;
  void post_send(uint64_t seq, const void* src, size_t bytes) override;
  bool send_done(uint64_t seq) override;
  void post_recv(uint64_t seq, size_t bytes, void* dst) override;
  const void* test_recv(uint64_t seq) override;
  void release_recv(uint64_t seq) override;

 private:
  enum class Tx { Free, Queued, InFlight };  // Queued: waiting for the device
  enum class Rx { Idle, Waiting, Posted, Delivered };  // Waiting: for the device
  struct SendSlot {
    Tx state = Tx::Free;
    uint64_t seq = 0;
    const void* src = nullptr;  // what MPI sends: the host slot (staged) or the caller's memory
    size_t bytes = 0;
    std::vector<MPI_Request> req;        // one per message of the block
    std::unique_ptr<DeviceEvent> ready;  // the block is in `src`
  };
  struct RecvSlot {
    Rx state = Rx::Idle;
    uint64_t seq = ~uint64_t{0};
    void* target = nullptr;  // device memory the block ends up in
    size_t bytes = 0;
    void* land = nullptr;    // where MPI writes: the host slot (staged) or target
    std::vector<MPI_Request> req;  // one per message of the block
    std::unique_ptr<DeviceEvent> copied;  // staged: the host slot has been copied out
    std::unique_ptr<DeviceEvent> free;    // direct: work queued before the receive is done
  };

  size_t slot(uint64_t seq) const { return static_cast<size_t>(seq % static_cast<uint64_t>(window_)); }
  /// Hands queued sends whose data is ready, and receives whose landing place
  /// is free, to MPI, oldest first.
  void pump();
  /// Completes an in-flight send if MPI is done with it.
  bool test_send(SendSlot& s);
  char* host_send(size_t s) const { return host_send_.as<char>() + s * slot_bytes_; }
  char* host_recv(size_t s) const { return host_recv_.as<char>() + s * slot_bytes_; }

  Device& dev_;
  MPI_Comm comm_;
  size_t max_message_, per_slot_;
  int tag_out_, tag_in_;
  bool staged_;
  DeviceBuffer send_slots_, recv_slots_;
  PinnedBuffer host_send_, host_recv_;  // staged only
  std::vector<SendSlot> tx_;
  std::vector<RecvSlot> rx_;
  std::deque<size_t> queued_;   // send slots in posting order, waiting for their event
  std::deque<size_t> waiting_;  // receive slots in posting order, waiting for theirs
};

}  // namespace lpsgd::comm
