// The MPI library's own MPI_Bcast / MPI_Reduce / MPI_Allreduce, behind the
// same handle, for comparison. The call blocks inside start-up of the handle.
// GPU buffers go to MPI directly when it is CUDA-aware, else through pinned
// host copies of the input and output.
#include <climits>
#include <memory>
#include <string>

#include "comm/collectives/factory.hpp"
#include "comm/communicator.hpp"
#include "core/error.hpp"

namespace lpsgd::comm {
namespace {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
  }
  return MPI_BYTE;
}

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
  MpiCollective(Communicator& c, const CollArgs& a) : Collective(c, a, Algo::Mpi, 0) {
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
    if (comm_.stages_through_host()) {
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
        MPI_CHECK(MPI_Reduce(send, args_.out, n, t, MPI_SUM, args_.root, comm));
        if (root && args_.op == ReduceOp::Avg) dev.scale(args_.dtype, args_.out, 1.0 / comm_.size(), args_.count);
        break;
      }
      case CollKind::Allreduce:
        MPI_CHECK(MPI_Allreduce(in_place ? MPI_IN_PLACE : in, args_.out, n, t, MPI_SUM, comm));
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
        MPI_CHECK(MPI_Reduce(hin, hout, n, t, MPI_SUM, args_.root, comm));
        if (root) {
          dev.copy_from_host(args_.out, hout, bytes);
          if (args_.op == ReduceOp::Avg) dev.scale(args_.dtype, args_.out, 1.0 / comm_.size(), args_.count);
        }
        break;
      case CollKind::Allreduce:
        dev.copy_to_host(hin, in, bytes);
        MPI_CHECK(MPI_Allreduce(hin, hout, n, t, MPI_SUM, comm));
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
};

}  // namespace

std::unique_ptr<Collective> make_mpi(Communicator& c, const CollArgs& a) {
  return std::make_unique<MpiCollective>(c, a);
}

}  // namespace lpsgd::comm
