#include "comm/types.hpp"

#include <sstream>

#include "core/error.hpp"

namespace lpsgd::comm {

const char* coll_name(CollKind k) {
  switch (k) {
    case CollKind::Bcast: return "bcast";
    case CollKind::Reduce: return "reduce";
    case CollKind::Allreduce: return "allreduce";
  }
  return "?";
}

const char* algo_name(Algo a) {
  switch (a) {
    case Algo::Lp: return "lp";
    case Algo::Tree: return "tree";
    case Algo::Mst: return "mst";
    case Algo::Be: return "be";
    case Algo::Ring: return "ring";
    case Algo::Mpi: return "mpi";
    case Algo::Auto: return "auto";
  }
  return "?";
}

const char* op_name(ReduceOp o) { return o == ReduceOp::Sum ? "sum" : "avg"; }

const char* link_kind_name(LinkKind k) {
  switch (k) {
    case LinkKind::None: return "none";
    case LinkKind::Mpi: return "mpi";
    case LinkKind::Shm: return "shm";
  }
  return "?";
}

CollKind parse_coll(const std::string& s) {
  if (s == "bcast" || s == "broadcast") return CollKind::Bcast;
  if (s == "reduce") return CollKind::Reduce;
  if (s == "allreduce") return CollKind::Allreduce;
  LPSGD_USAGE_ERROR("unknown collective '" << s << "' (use bcast, reduce or allreduce)");
}

Algo parse_algo(const std::string& s) {
  if (s == "lp") return Algo::Lp;
  if (s == "tree") return Algo::Tree;
  if (s == "mst") return Algo::Mst;
  if (s == "be") return Algo::Be;
  if (s == "ring") return Algo::Ring;
  if (s == "mpi") return Algo::Mpi;
  if (s == "auto") return Algo::Auto;
  LPSGD_USAGE_ERROR("unknown algorithm '" << s << "' (use lp, tree, mst, be, ring, mpi or auto)");
}

ReduceOp parse_op(const std::string& s) {
  if (s == "sum") return ReduceOp::Sum;
  if (s == "avg" || s == "average" || s == "mean") return ReduceOp::Avg;
  LPSGD_USAGE_ERROR("unknown reduction '" << s << "' (use sum or avg)");
}

LinksMode parse_links(const std::string& s) {
  if (s == "auto") return LinksMode::Auto;
  if (s == "mpi") return LinksMode::Mpi;
  LPSGD_USAGE_ERROR("unknown --links '" << s << "' (use auto or mpi)");
}

bool Signature::operator==(const Signature& o) const {
  return magic == o.magic && kind == o.kind && algo == o.algo && dtype == o.dtype &&
         op == o.op && root == o.root && in_float == o.in_float && count == o.count && block_bytes == o.block_bytes &&
         serial == o.serial;
}

std::string Signature::describe() const {
  if (magic != Signature{}.magic) return "garbage (not an lpsgd collective header)";
  std::ostringstream os;
  os << coll_name(static_cast<CollKind>(kind)) << "(" << algo_name(static_cast<Algo>(algo))
     << ") #" << serial << " count=" << count << " dtype=" << dtype_name(static_cast<DType>(dtype))
     << " op=" << op_name(static_cast<ReduceOp>(op));
  if (in_float) os << " in=float";
  if (kind != static_cast<uint8_t>(CollKind::Allreduce)) os << " root=" << root;
  os << " block=" << block_bytes;
  return os.str();
}

}  // namespace lpsgd::comm
