// Vocabulary of lib/comm: which collective, which algorithm, which reduction,
// and the arguments of one call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace lpsgd::comm {

enum class CollKind : uint8_t { Bcast = 0, Reduce = 1, Allreduce = 2 };
enum class Algo : uint8_t { Lp = 0, Mst = 1, Be = 2, Ring = 3, Mpi = 4, Auto = 5, Tree = 6 };
enum class ReduceOp : uint8_t { Sum = 0, Avg = 1 };
/// How neighbours on one node talk: peer links (shared memory) or MPI everywhere.
enum class LinksMode : uint8_t { Auto = 0, Mpi = 1 };
enum class LinkKind : uint8_t { None = 0, Mpi = 1, Shm = 2 };

const char* coll_name(CollKind k);
const char* algo_name(Algo a);
const char* op_name(ReduceOp o);
const char* link_kind_name(LinkKind k);
CollKind parse_coll(const std::string& s);   // bcast, reduce, allreduce
Algo parse_algo(const std::string& s);       // lp, tree, mst, be, ring, mpi, auto
/// Algorithms that cut the message into pipelined blocks (LP, tree).
inline bool uses_blocks(Algo a) { return a == Algo::Lp || a == Algo::Tree; }
ReduceOp parse_op(const std::string& s);     // sum, avg
LinksMode parse_links(const std::string& s); // auto, mpi

/// One collective call. Buffers live on the communicator's device.
///  - bcast: root's data is `in` (or `out` when in == out / in == nullptr);
///    every rank receives into `out`.
///  - reduce: every rank contributes `in` (or `out` if in-place); only the
///    root's `out` is written.
///  - allreduce: every rank contributes `in` and receives into `out`.
/// `in` is never modified when it differs from `out`.
struct CollArgs {
  CollKind kind = CollKind::Allreduce;
  const void* in = nullptr;
  void* out = nullptr;
  size_t count = 0;
  DType dtype = DType::F32;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;  ///< chain position of the root (bcast, reduce)
  /// A 16-bit reduce or allreduce whose `in` holds floats (in != out): each
  /// is rounded to dtype as it is read, the bits of converting the input
  /// first, without that extra pass. Only algorithms that read_float_input()
  /// take it.
  bool in_float = false;
  DType in_type() const { return in_float ? DType::F32 : dtype; }
};

/// Whether `algo` reads a float input for a 16-bit message itself
/// (CollArgs::in_float), fusing the conversion into its first pass: LP.
inline bool reads_float_input(Algo algo) { return algo == Algo::Lp; }

/// What every rank must agree on; exchanged with chain neighbours at start.
struct Signature {
  uint32_t magic = 0x4C505347;  // "LPSG"
  uint8_t kind = 0, algo = 0, dtype = 0, op = 0;
  int32_t root = 0;
  uint8_t in_float = 0;
  uint8_t pad8[3] = {0, 0, 0};
  uint64_t count = 0;
  uint64_t block_bytes = 0;
  uint64_t serial = 0;  ///< index of this collective on its communicator
  // Not compared: where a neighbour can reach this rank's input and output
  // directly (Link::share; 0 = it cannot). Ranks differ here.
  uint64_t share_in = 0, share_out = 0;
  bool operator==(const Signature& o) const;
  std::string describe() const;
};

}  // namespace lpsgd::comm
