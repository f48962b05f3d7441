// LinkBuilder: makes the two links of a rank for the communicator's device.
//
//                   same node (peer link)     other node (MPI link)
//   CPU memory      ShmLink                   MpiLink
//   GPU memory      CudaIpcLink               DeviceMpiLink (direct if MPI is
//                                             CUDA-aware, else staged)
// (and DeviceMpiLink, staged, for CPU memory when staging is asked for).
//
// It owns what the links of a node share (the shared window, the exported GPU
// slots), so it outlives them. Construction is collective over the node.
#pragma once

#include <mpi.h>

#include <memory>

#include "comm/link.hpp"
#include "device/device.hpp"

namespace lpsgd::comm {

class Chain;
class ShmArena;
class CudaIpcArena;

class LinkBuilder {
 public:
  /// MPI links use `link_comm` (rank = chain position); stage_mpi: MPI links
  /// copy through pinned host slots (DeviceMpiLink, staged), on any device.
  LinkBuilder(const Chain& chain, Device& dev, MPI_Comm link_comm, int window, size_t slot_bytes,
              size_t max_message, bool stage_mpi);
  ~LinkBuilder();
  LinkBuilder(const LinkBuilder&) = delete;
  LinkBuilder& operator=(const LinkBuilder&) = delete;

  /// The link to my left (side 0) or right (side 1) neighbour, which must exist.
  std::unique_ptr<Link> make(int side);
  /// An MPI link to any rank (the pipelined tree's edges), its two directions
  /// told apart by the tags on `comm`.
  std::unique_ptr<Link> make_mpi(MPI_Comm comm, int peer, int tag_out, int tag_in);
  /// The node's shared window for CPU peer links (nullptr for GPU memory).
  ShmArena* shm() const { return shm_.get(); }

 private:
  const Chain& chain_;
  Device& dev_;
  MPI_Comm comm_;
  int window_;
  size_t slot_bytes_;
  size_t max_message_;  // MPI links' largest message
  bool stage_mpi_;
  std::unique_ptr<ShmArena> shm_;      // CPU peer links
  std::unique_ptr<CudaIpcArena> ipc_;  // GPU peer links
};

}  // namespace lpsgd::comm
