// The MPI library's own MPI_Bcast / MPI_Reduce / MPI_Allreduce, behind the
// same handle, for comparison. The call blocks inside start-up of the handle.
// GPU buffers go to MPI directly when it is CUDA-aware, else through pinned
// host copies of the input and output.
//
// bf16 and fp16: MPI has no such types. They travel as MPI_UINT16_T and reduce
// with a user operation (MPI_Op_create) that adds in float and rounds once per
// addition, as the device kernels do. The operation is declared
// non-commutative: MPI must then keep the operands in rank order (x0 + x1 +
// ...; it still picks the association, by size and P, not by timing), so every
// rank gets the same bits and a repeat gives the same bits (the oracle tests
// check both); declared commutative, the library may also reorder operands,
// e.g. by arrival. The user function runs on host memory, so 16-bit
// reductions of GPU buffers go through the host copies.
#include <climits>
#include <memory>
#include <string>

#include "comm/collectives/factory.hpp"
#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "kernels/cpu/elementwise.hpp"

namespace lpsgd::comm {
namespace {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::BF16:
    case DType::F16: return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

// MPI's user-function signature: inout[i] = in[i] + inout[i], in float,
// rounded once to T (kernels' ReduceAdd).
template <DType T>
void sum16(void* in, void* inout, int* len, MPI_Datatype*) {
  kernels::cpu::reduce_add(T, inout, in, inout, static_cast<size_t>(*len));
}

// The reduction operation of a handle: MPI_SUM for the types MPI knows, a
// non-commutative user operation for the 16-bit ones, freed with the handle.
class SumOp {
 public:
  explicit SumOp(DType t) {
    if (t == DType::BF16) MPI_CHECK(MPI_Op_create(sum16<DType::BF16>, /*commute=*/0, &op_));
    else if (t == DType::F16) MPI_CHECK(MPI_Op_create(sum16<DType::F16>, /*commute=*/0, &op_));
    else return;
    owned_ = true;
  }
  ~SumOp() {
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (owned_ && !finalized) MPI_Op_free(&op_);
  }
  SumOp(const SumOp&) = delete;
  SumOp& operator=(const SumOp&) = delete;
  MPI_Op get() const { return op_; }

 private:
  MPI_Op op_ = MPI_SUM;
  bool owned_ = false;
};

// Whether the MPI library is MPICH (or one derived from it that says so).
bool mpich() {
  static const bool is = [] {
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(v, &len);
    return std::string(v, static_cast<size_t>(len)).find("MPICH") != std::string::npos;
  }();
  return is;
}

class MpiCollective final : public Collective {
 public:
  MpiCollective(Communicator& c, const CollArgs& a)
      : Collective(c, a, Algo::Mpi, 0), sum_(a.dtype) {
    LPSGD_CHECK(a.count <= static_cast<size_t>(INT_MAX), "mpi: count above INT_MAX");
  }

 private:
  void on_start() override {
    MPI_Comm comm = comm_.p2p_comm();
    const int n = static_cast<int>(args_.count);
    const MPI_Datatype t = mpi_type(args_.dtype);
    const bool root = comm_.rank() == args_.root;
    const void* in = args_.in ? args_.in : args_.out;
    const bool in_place = in == args_.out;
    Device& dev = comm_.device();
    // The 16-bit user operation reads host memory only.
    const bool host_op = dtype_is_16bit(args_.dtype) && args_.kind != CollKind::Bcast;
    if (comm_.stages_through_host() || (host_op && dev.kind() != DeviceKind::Cpu)) {
      run_staged(comm, n, t, root, in);
      return;
    }
    if (dev.kind() != DeviceKind::Cpu) dev.synchronize();  // MPI reads what the queue wrote
    switch (args_.kind) {
      case CollKind::Bcast:
        if (root && !in_place) dev.copy(args_.out, in, args_.count * dtype_size(args_.dtype));
        dev.synchronize();  // the copy is queued on a GPU
        MPI_CHECK(MPI_Bcast(args_.out, n, t, args_.root, comm));
        break;
      case CollKind::Reduce: {
        const void* send = root && in_place ? MPI_IN_PLACE : in;
        if (send == MPI_IN_PLACE && args_.root != 0 && mpich()) {
          // MPICH (4.0.2 here, 4.1.1 too) crashes on an in-place reduce at a
          // root other than 0 once the message takes its reduce-scatter +
          // gather algorithm (pmodels/mpich#6540, fixed upstream by #6543):
          // the root passes a copy of its input instead.
          const size_t bytes = args_.count * dtype_size(args_.dtype);
          void* copy = comm_.scratch(0, bytes);
          dev.copy(copy, args_.out, bytes);
          dev.synchronize();
          send = copy;
        }
        MPI_CHECK(MPI_Reduce(send, args_.out, n, t, sum_.get(), args_.root, comm));
        if (root && args_.op == ReduceOp::Avg) dev.scale(args_.dtype, args_.out, 1.0 / comm_.size(), args_.count);
        break;
      }
      case CollKind::Allreduce:
        MPI_CHECK(MPI_Allreduce(in_place ? MPI_IN_PLACE : in, args_.out, n, t, sum_.get(), comm));
        if (args_.op == ReduceOp::Avg) dev.scale(args_.dtype, args_.out, 1.0 / comm_.size(), args_.count);
        break;
    }
  }
  // The same calls on pinned host copies: in -> host, MPI, host -> out.
  void run_staged(MPI_Comm comm, int n, MPI_Datatype t, bool root, const void* in) {
    Device& dev = comm_.device();
    const size_t bytes = args_.count * dtype_size(args_.dtype);
    char* hin = static_cast<char*>(comm_.host_stage(0, bytes));
    char* hout = static_cast<char*>(comm_.host_stage(1, bytes));
    switch (args_.kind) {
      case CollKind::Bcast:
        if (root) dev.copy_to_host(hout, in, bytes);
        MPI_CHECK(MPI_Bcast(hout, n, t, args_.root, comm));
        dev.copy_from_host(args_.out, hout, bytes);
        break;
      case CollKind::Reduce:
        dev.copy_to_host(hin, in, bytes);
        MPI_CHECK(MPI_Reduce(hin, hout, n, t, sum_.get(), args_.root, comm));
        if (root) {
          dev.copy_from_host(args_.out, hout, bytes);
          if (args_.op == ReduceOp::Avg) dev.scale(args_.dtype, args_.out, 1.0 / comm_.size(), args_.count);
        }
        break;
      case CollKind::Allreduce:
        dev.copy_to_host(hin, in, bytes);
        MPI_CHECK(MPI_Allreduce(hin, hout, n, t, sum_.get(), comm));
        dev.copy_from_host(args_.out, hout, bytes);
        if (args_.op == ReduceOp::Avg) dev.scale(args_.dtype, args_.out, 1.0 / comm_.size(), args_.count);
        break;
    }
  }

  bool on_progress(bool& moved) override {
    moved = true;
    return true;
  }
  std::string waiting_for() const override { return "the MPI library"; }

  SumOp sum_;
};

}  // namespace

std::unique_ptr<Collective> make_mpi(Communicator& c, const CollArgs& a) {
  return std::make_unique<MpiCollective>(c, a);
}

}  // namespace lpsgd::comm
