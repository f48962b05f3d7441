// Builds the collective object for a resolved algorithm.
#pragma once

#include <memory>

#include "comm/collective.hpp"

namespace lpsgd::comm {

class Communicator;

/// Elements per block of a pipelined algorithm (lp, tree); throws unless the
/// block is a whole, non-zero number of elements.
size_t elems_per_block(Algo algo, size_t block_bytes, DType dtype);

std::unique_ptr<Collective> make_lp(Communicator& c, const CollArgs& a, size_t block_bytes);
std::unique_ptr<Collective> make_tree(Communicator& c, const CollArgs& a, size_t block_bytes);
std::unique_ptr<Collective> make_mst(Communicator& c, const CollArgs& a);
std::unique_ptr<Collective> make_be(Communicator& c, const CollArgs& a);
std::unique_ptr<Collective> make_ring(Communicator& c, const CollArgs& a);
std::unique_ptr<Collective> make_mpi(Communicator& c, const CollArgs& a);

std::unique_ptr<Collective> make_collective(Communicator& c, Algo algo, const CollArgs& a,
                                            size_t block_bytes);

}  // namespace lpsgd::comm
