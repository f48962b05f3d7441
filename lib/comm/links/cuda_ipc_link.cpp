#include "comm/links/cuda_ipc_link.hpp"

#include <cuda_runtime_api.h>

#include <cstring>
#include <exception>
#include <string>

#include "comm/chain.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "device/cuda/cuda_device.hpp"
#include "kernels/cuda/signal.cuh"

namespace lpsgd::comm {

/// What each node rank tells the others at set-up.
struct CudaIpcArena::Export {
  cudaIpcMemHandle_t handle;
  int32_t present;  // has receive slots (it has a peer link)
  int32_t ok;       // its set-up worked; otherwise every rank of the node fails
  int32_t ordinal;  // its GPU, for messages
};

namespace {
constexpr uintptr_t kPage = 4096;
}  // namespace

CudaIpcArena::CudaIpcArena(const Chain& chain, Device& dev, int window, size_t slot_bytes,
                           bool needed)
    : chain_(chain), dev_(dev), window_(window), slot_bytes_(slot_bytes),
      flags_(chain, window, 0, needed) {
  cuda_make_current(dev);
  Export mine{};
  mine.ordinal = cuda_ordinal_of(dev);
  mine.ok = 1;
  std::string error;
  if (needed) {
    try {
      const size_t bytes = 2 * static_cast<size_t>(window) * slot_bytes;
      CUDA_CHECK(cudaMalloc(&recv_, bytes));
      CUDA_CHECK(cudaMemset(recv_, 0, bytes));
      CUDA_CHECK(cudaDeviceSynchronize());
      CUDA_CHECK(cudaIpcGetMemHandle(&mine.handle, recv_));
      mine.present = 1;
      // My flags, mapped for my GPU: it stores them, the neighbours' hosts read them.
      my_ctrl_host_ = reinterpret_cast<ShmControl*>(flags_.segment(chain.pos()));
      const auto begin = reinterpret_cast<uintptr_t>(my_ctrl_host_) & ~(kPage - 1);
      const auto end =
          (reinterpret_cast<uintptr_t>(my_ctrl_host_) + sizeof(ShmControl) + kPage - 1) & ~(kPage - 1);
      CUDA_CHECK(cudaHostRegister(reinterpret_cast<void*>(begin), end - begin,
                                  cudaHostRegisterMapped | cudaHostRegisterPortable));
      registered_ = reinterpret_cast<void*>(begin);
      void* d = nullptr;
      CUDA_CHECK(cudaHostGetDevicePointer(&d, my_ctrl_host_, 0));
      my_ctrl_dev_ = static_cast<ShmControl*>(d);
    } catch (const Error& e) {
      mine.ok = 0;
      error = e.message();
    }
  }
  // Everyone on the node learns everyone's handle, and whether set-up worked
  // everywhere, so a failure stops all ranks here instead of hanging them later.
  int n = 0;
  MPI_CHECK(MPI_Comm_size(chain.node_comm(), &n));
  exports_.resize(static_cast<size_t>(n) * sizeof(Export));
  MPI_CHECK(MPI_Allgather(&mine, sizeof(Export), MPI_BYTE, exports_.data(), sizeof(Export),
                          MPI_BYTE, chain.node_comm()));
  if (!mine.ok)
    LPSGD_THROW("CUDA peer links: set-up failed on GPU " << mine.ordinal << ": " << error
                << " (use --links mpi to avoid CUDA IPC)");
  for (int r = 0; r < n; ++r) {
    Export e;
    std::memcpy(&e, exports_.data() + static_cast<size_t>(r) * sizeof(Export), sizeof(Export));
    if (!e.ok)
      LPSGD_THROW("CUDA peer links: set-up failed on node rank " << r << " (GPU " << e.ordinal
                  << "); see its message");
  }
}

CudaIpcArena::~CudaIpcArena() {
  // The links are gone (their queues drained); my GPU must not store into the
  // flags after they are unregistered, and no neighbour may still write into
  // my receive slots when they are freed: drain, then meet the node.
  try {
    cuda_make_current(dev_);
  } catch (const Error&) {
  }
  cudaDeviceSynchronize();
  if (registered_) cudaHostUnregister(registered_);
  // The barrier is collective: skipped while an error unwinds this rank alone
  // (the process ends right after, see ShmArena).
  if (std::uncaught_exceptions() > 0) return;
  MPI_Barrier(chain_.node_comm());
  if (recv_) cudaFree(recv_);
}

ShmControl* CudaIpcArena::control(int chain_pos) const {
  return reinterpret_cast<ShmControl*>(flags_.segment(chain_pos));
}

char* CudaIpcArena::recv_slots(int side) const {
  LPSGD_CHECK(recv_, "CUDA peer links: no receive slots on this rank");
  return static_cast<char*>(recv_) + static_cast<size_t>(side) * static_cast<size_t>(window_) * slot_bytes_;
}

char* CudaIpcArena::open_recv_slots(int chain_pos) const {
  const int r = node_rank_of(chain_, chain_pos);
  Export e;
  std::memcpy(&e, exports_.data() + static_cast<size_t>(r) * sizeof(Export), sizeof(Export));
  LPSGD_CHECK(e.present, "CUDA peer links: chain position " << chain_pos << " exported no slots");
  void* base = nullptr;
  const cudaError_t rc = cudaIpcOpenMemHandle(&base, e.handle, cudaIpcMemLazyEnablePeerAccess);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    LPSGD_THROW("CUDA peer link to chain position " << chain_pos << ": cannot map its GPU "
                << e.ordinal << " memory from GPU " << cuda_ordinal_of(dev_) << ": "
                << cudaGetErrorString(rc) << " (GPUs without peer access: use --links mpi)");
  }
  return static_cast<char*>(base);
}

CudaIpcLink::CudaIpcLink(Device& dev, CudaIpcArena& arena, int my_pos, int peer, int dir)
    : Link(peer, arena.window(), arena.slot_bytes()), dev_(dev) {
  LPSGD_CHECK(dev.kind() == DeviceKind::Cuda, "CUDA peer links carry GPU memory only");
  cuda_make_current(dev);
  mine_host_ = arena.control(my_pos);
  theirs_ = arena.control(peer);
  mine_dev_ = arena.my_control_on_device();
  dir_out_ = dir;
  dir_in_ = dir == ShmArena::kToLeft ? ShmArena::kToRight : ShmArena::kToLeft;
  // Blocks from a left neighbour land in side 0 of my slots, from a right one
  // in side 1. I am my right neighbour's left one, and vice versa.
  const int in_side = dir == ShmArena::kToLeft ? 0 : 1;
  const int out_side = dir == ShmArena::kToRight ? 0 : 1;
  in_slots_ = arena.recv_slots(in_side);
  peer_base_ = arena.open_recv_slots(peer);
  out_slots_ = peer_base_ + static_cast<size_t>(out_side) * static_cast<size_t>(window_) * slot_bytes_;
}

CudaIpcLink::~CudaIpcLink() {
  try {
    dev_.synchronize();  // nothing queued may still write through the mapping
  } catch (const Error& e) {
    LPSGD_WARN("CUDA peer link to rank " << peer_ << ": " << e.message());
  }
  if (peer_base_) cudaIpcCloseMemHandle(peer_base_);
}

uint64_t* CudaIpcLink::on_device(const std::atomic<uint64_t>& my_flag) const {
  const auto offset = reinterpret_cast<const char*>(&my_flag) - reinterpret_cast<const char*>(mine_host_);
  return reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(mine_dev_) + offset);
}

bool CudaIpcLink::can_send(uint64_t seq) {
  // Block seq goes into the slot of block seq - W: the peer must have read that.
  const uint64_t consumed = theirs_->consumed[dir_in_].load(std::memory_order_acquire);
  return seq < consumed + static_cast<uint64_t>(window_);
}

void* CudaIpcLink::send_slot(uint64_t seq) { return out_slots_ + slot(seq) * slot_bytes_; }

void CudaIpcLink::post_send(uint64_t seq, const void* src, size_t bytes) {
  LPSGD_CHECK(bytes <= slot_bytes_, "CUDA peer link: block of " << bytes << " bytes exceeds slot");
  void* dst = send_slot(seq);
  if (src != dst) dev_.copy(dst, src, bytes);
  cuda_make_current(dev_);
  kernels::cuda::publish(on_device(mine_host_->ready[dir_out_][slot(seq)]), seq + 1,
                         cuda_stream_of(dev_));
}

const void* CudaIpcLink::test_recv(uint64_t seq) {
  const uint64_t v = theirs_->ready[dir_in_][slot(seq)].load(std::memory_order_acquire);
  return v == seq + 1 ? in_slots_ + slot(seq) * slot_bytes_ : nullptr;
}

void CudaIpcLink::release_recv(uint64_t seq) {
  Link::release_recv(seq);
  cuda_make_current(dev_);
  kernels::cuda::publish(on_device(mine_host_->consumed[dir_out_]), seq + 1, cuda_stream_of(dev_));
}

}  // namespace lpsgd::comm
