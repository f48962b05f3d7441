// Builds the collective object for a resolved algorithm.
#pragma once

#include <memory>

#include "comm/collective.hpp"

namespace lpsgd::comm {

class Communicator;

std::unique_ptr<Collective> make_lp(Communicator& c, const CollArgs& a, size_t block_bytes);
/// Whether LP runs this collective with the centre alternating by block
/// between two ranks (allreduce of 2 ranks, LPSGD_LP_PAIR=1), which halves
/// each rank's reductions; the cost model asks too.
bool lp_shares_reductions(CollKind kind, int P);
std::unique_ptr<Collective> make_mst(Communicator& c, const CollArgs& a);
std::unique_ptr<Collective> make_be(Communicator& c, const CollArgs& a);
std::unique_ptr<Collective> make_ring(Communicator& c, const CollArgs& a);
std::unique_ptr<Collective> make_mpi(Communicator& c, const CollArgs& a);

std::unique_ptr<Collective> make_collective(Communicator& c, Algo algo, const CollArgs& a,
                                            size_t block_bytes);

}  // namespace lpsgd::comm
