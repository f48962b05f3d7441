#include "comm/collectives/factory.hpp"

#include "comm/cost_model.hpp"
#include "core/error.hpp"

namespace lpsgd::comm {

size_t elems_per_block(Algo algo, size_t block_bytes, DType dtype) {
  const size_t esize = dtype_size(dtype);
  LPSGD_CHECK(block_bytes >= esize && block_bytes % esize == 0,
              algo_name(algo) << " block of " << block_bytes << " bytes is not a whole number of "
                              << dtype_name(dtype) << " elements");
  return block_bytes / esize;
}

std::unique_ptr<Collective> make_collective(Communicator& c, Algo algo, const CollArgs& a,
                                            size_t block_bytes) {
  if (!supports(algo, a.kind))
    LPSGD_USAGE_ERROR("algorithm " << algo_name(algo) << " does not implement "
                                   << coll_name(a.kind) << " (ring: allreduce only)");
  switch (algo) {
    case Algo::Lp: return make_lp(c, a, block_bytes);
    case Algo::Tree: return make_tree(c, a, block_bytes);
    case Algo::Mst: return make_mst(c, a);
    case Algo::Be: return make_be(c, a);
    case Algo::Ring: return make_ring(c, a);
    case Algo::Mpi: return make_mpi(c, a);
    case Algo::Auto: break;
  }
  LPSGD_THROW("algorithm auto must be resolved before make_collective");
}

}  // namespace lpsgd::comm
