// Batch normalization across ranks (see batch_stats.hpp).
#include "train/batch_stats.hpp"

#include <mpi.h>

namespace lpsgd::train {

BatchStats::BatchStats(comm::Communicator& comm, nn::Model& m, bool sync, comm::Algo algo)
    : comm_(comm), model_(m), algo_(algo) {
  if (!sync || comm.size() == 1 || !m.has_state()) return;
  comm::CommOptions co = comm.options();
  co.calibrate_if_missing = false;  // the gradients' communicator has calibrated (or been told)
  sync_comm_ = std::make_unique<comm::Communicator>(MPI_COMM_WORLD, m.device(), co);
  sync_ = [this](double* sums, size_t n) {
    model_.device().synchronize();  // a GPU computed the sums on its stream
    sync_comm_->run(algo_, {comm::CollKind::Allreduce, sums, sums, n, DType::F64, comm::ReduceOp::Sum, 0});
    return sync_comm_->size();
  };
  m.set_batch_stats_sync(&sync_);
}

BatchStats::~BatchStats() {
  if (sync_comm_) model_.set_batch_stats_sync(nullptr);
}

void BatchStats::average() {
  if (comm_.size() == 1 || !model_.has_state()) return;
  const nn::Tensor s = model_.state();
  model_.device().synchronize();
  comm_.run(algo_, {comm::CollKind::Allreduce, s.data(), s.data(), static_cast<size_t>(s.numel()),
                    DType::F32, comm::ReduceOp::Sum, 0});
  comm_.device().synchronize();
  model_.device().scale(DType::F32, s.data(), 1.0 / comm_.size(), static_cast<size_t>(s.numel()));
  model_.device().synchronize();
}

}  // namespace lpsgd::train
