#include "comm/links/link_builder.hpp"

#include "comm/chain.hpp"
#include "comm/links/device_mpi_link.hpp"
#include "comm/links/mpi_link.hpp"
#include "comm/links/shm_link.hpp"
#include "core/error.hpp"
#include "lpsgd/config.hpp"

#if LPSGD_HAVE_CUDA
#include "comm/links/cuda_ipc_link.hpp"
#else
namespace lpsgd::comm {
class CudaIpcArena {};  // no GPU peer links in this build
}  // namespace lpsgd::comm
#endif

namespace lpsgd::comm {

namespace {
constexpr int kTagDataRightwards = 1;
constexpr int kTagDataLeftwards = 2;
}  // namespace

LinkBuilder::LinkBuilder(const Chain& chain, Device& dev, MPI_Comm link_comm, int window,
                         size_t slot_bytes, size_t max_message, bool stage_mpi)
    : chain_(chain), dev_(dev), comm_(link_comm), window_(window), slot_bytes_(slot_bytes),
      max_message_(max_message), stage_mpi_(stage_mpi || !mpi_accepts_device_memory(dev)) {
  const bool peers = chain.left_kind() == LinkKind::Shm || chain.right_kind() == LinkKind::Shm;
  if (dev.kind() == DeviceKind::Cpu) {
    shm_ = std::make_unique<ShmArena>(chain, window, slot_bytes, peers);
  } else {
#if LPSGD_HAVE_CUDA
    ipc_ = std::make_unique<CudaIpcArena>(chain, dev, window, slot_bytes, peers);
#else
    LPSGD_THROW("peer links for " << device_kind_name(dev.kind()) << " buffers are not built");
#endif
  }
}

LinkBuilder::~LinkBuilder() = default;

std::unique_ptr<Link> LinkBuilder::make(int side) {
  const int pos = chain_.pos();
  const int peer = side == 0 ? pos - 1 : pos + 1;
  const LinkKind kind = side == 0 ? chain_.left_kind() : chain_.right_kind();
  LPSGD_CHECK(kind != LinkKind::None, "no neighbour on the " << (side == 0 ? "left" : "right"));
  const int dir = side == 0 ? ShmArena::kToLeft : ShmArena::kToRight;
  if (kind == LinkKind::Shm) {
    if (shm_) return std::make_unique<ShmLink>(dev_, *shm_, pos, peer, dir, window_, slot_bytes_);
#if LPSGD_HAVE_CUDA
    if (ipc_) return std::make_unique<CudaIpcLink>(dev_, *ipc_, pos, peer, dir);
#endif
    LPSGD_THROW("no peer links for " << device_kind_name(dev_.kind()) << " buffers");
  }
  const int tag_out = side == 0 ? kTagDataLeftwards : kTagDataRightwards;
  const int tag_in = side == 0 ? kTagDataRightwards : kTagDataLeftwards;
  return make_mpi(comm_, peer, tag_out, tag_in);
}

std::unique_ptr<Link> LinkBuilder::make_mpi(MPI_Comm comm, int peer, int tag_out, int tag_in) {
  if (dev_.kind() == DeviceKind::Cpu && !stage_mpi_)
    return std::make_unique<MpiLink>(dev_, comm, peer, window_, slot_bytes_, max_message_, tag_out,
                                     tag_in);
  return std::make_unique<DeviceMpiLink>(dev_, comm, peer, window_, slot_bytes_, max_message_,
                                         tag_out, tag_in, stage_mpi_);
}

}  // namespace lpsgd::comm
