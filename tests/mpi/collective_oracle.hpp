// The collective oracle: runs one lpsgd collective and checks it against the
// MPI library's own collective on inputs whose sums are exact. Results must
// match bitwise, inputs must be unchanged, nothing may be written past the end
// or, for reduce, into a non-root's out. bf16 and fp16 sums round: their
// results must lie within a derived bound of the exact sum of the same 16-bit
// inputs, with identical bits on every rank and in a repeat. Shared by the oracle matrix
// (test_collectives.cpp) and the random soak (tests/soak).
#pragma once

#include <cstddef>
#include <string>

#include "comm/communicator.hpp"
#include "comm/types.hpp"

namespace lpsgd::test {

struct OracleCase {
  comm::CollKind kind = comm::CollKind::Allreduce;
  comm::Algo algo = comm::Algo::Lp;
  DType dtype = DType::F32;
  comm::ReduceOp op = comm::ReduceOp::Sum;
  int root = 0;
  size_t count = 0;
  bool in_place = false;
  size_t block_bytes = 0;  ///< LP block; 0: the cost model's
  int salt = 0;            ///< varies the inputs
  /// Buffers from Communicator::alloc_shared (peer links read them in place),
  /// each of shared_bytes; null: the case allocates its own (either may be).
  void* shared_in = nullptr;
  void* shared_out = nullptr;
  size_t shared_bytes = 0;

  bool shared() const { return shared_in != nullptr || shared_out != nullptr; }
  std::string str(int P) const;
};

/// Runs `c` on `cm` (collective: every rank calls it with the same case) and
/// returns what this rank found wrong, or "" when its result is right. lpsgd
/// errors (a stall, a mismatch between ranks) propagate as exceptions.
std::string check_collective(comm::Communicator& cm, const OracleCase& c);

}  // namespace lpsgd::test
