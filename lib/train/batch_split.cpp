// Global batch to micro-batches (see batch_split.hpp).
#include "train/batch_split.hpp"

#include <sstream>

#include "core/error.hpp"

namespace lpsgd::train {

std::string BatchSplit::describe() const {
  std::ostringstream os;
  os << ranks << " rank" << (ranks == 1 ? "" : "s") << " x batch " << micro;
  if (accumulate > 1) os << " x " << accumulate << " micro-batches";
  os << " = " << global() << " per step";
  return os.str();
}

BatchSplit split_batch(int64_t global, int ranks, int64_t max_micro, int64_t accumulate) {
  if (max_micro < 1) LPSGD_USAGE_ERROR("--batch must be at least 1, got " << max_micro);
  if (accumulate < 1 || accumulate > (int64_t{1} << 20))
    LPSGD_USAGE_ERROR("--accumulate must be in [1, 1048576], got " << accumulate);
  if (global < 0) LPSGD_USAGE_ERROR("--global-batch must be at least 1, got " << global);
  BatchSplit s;
  s.ranks = ranks;
  if (global == 0) {
    s.micro = max_micro;
    s.accumulate = accumulate;
    return s;
  }
  if (accumulate != 1)
    LPSGD_USAGE_ERROR("--global-batch " << global << " chooses the micro-batches itself; drop --accumulate "
                                        << accumulate << " (or --global-batch)");
  if (global % ranks != 0)
    LPSGD_USAGE_ERROR("--global-batch " << global << " cannot be split over " << ranks << " ranks ("
                                        << global << " is not a multiple of " << ranks
                                        << "); use a global batch that " << ranks << " divides");
  const int64_t per_rank = global / ranks;
  // The smallest K with per_rank / K a whole micro-batch of at most max_micro.
  for (int64_t k = (per_rank + max_micro - 1) / max_micro; k <= per_rank; ++k)
    if (per_rank % k == 0) {
      s.micro = per_rank / k;
      s.accumulate = k;
      return s;
    }
  LPSGD_THROW("no split of " << per_rank);  // unreachable: k = per_rank splits
}

}  // namespace lpsgd::train
