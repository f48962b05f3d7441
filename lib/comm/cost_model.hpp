// The α-β-γ cost model: predicted time of every algorithm, the best LP block
// size, and the choice behind `auto`.
//
//   α  latency of one message on a link (s)       per link kind: shm, mpi
//   β  time per byte on a link (s/B)              per link kind: shm, mpi
//   γ  time per byte of a reduce step (s/B)       per device
//
// LP on a chain with depth D (hops from the farthest rank to the centre) and
// k = ⌈n/b⌉ blocks takes (S + k)(α + bβ [+ bγ]) with S = D−1 (bcast, reduce) or
// 2D−1 (allreduce: reduce to the middle, broadcast back out), plus one when the
// chain has peer links (the sender's copy into its slot is a stage of its own).
// Minimising over b
// gives b* = √(nα / (S(β[+γ]))). Baselines: MST ⌈log P⌉(α + nβ); BE
// (scatter/reduce-scatter + allgather) ≈ 2 log P α + 2 n(P−1)/P β; ring
// allreduce 2(P−1)(α + nβ/P). Calibrated numbers come from `lpsgd bench
// --calibrate`, which writes the file read here.
#pragma once

#include <array>
#include <cstddef>
#include <string>

#include "comm/types.hpp"

namespace lpsgd::comm {

class Chain;

/// Which link kinds a chain has; LP pays for the slowest of them.
struct LinkMix {
  bool shm = false;
  bool mpi = true;
  static LinkMix of(const Chain& chain);
};

class CostModel {
 public:
  static constexpr int kParams = 5;
  double alpha_shm = 1.0e-6, beta_shm = 1.0 / 5e9;
  double alpha_mpi = 3.0e-6, beta_mpi = 1.0 / 3e9;
  double gamma = 1.0 / 4e9;

  /// Reads `path` (or $LPSGD_CALIBRATION when path is empty); defaults if absent.
  static CostModel load_or_default(const std::string& path);
  /// Writes `name = value` lines; atomically (temporary file, then rename).
  void save(const std::string& path) const;
  /// The default calibration file: $LPSGD_CALIBRATION, else ~/.cache/lpsgd/calibration.ini.
  static std::string default_path();

  std::array<double, kParams> params() const { return {alpha_shm, beta_shm, alpha_mpi, beta_mpi, gamma}; }
  void set_params(const std::array<double, kParams>& p);

  /// Predicted seconds for n bytes on P ranks; NaN for the MPI library (unknown)
  /// and +inf for an unsupported (algorithm, collective) pair.
  double predict(Algo algo, CollKind kind, double n, int P, int root, double block,
                 LinkMix mix) const;
  /// LP's best block in bytes (not yet clamped to slots or element size).
  double best_block(CollKind kind, double n, int P, int root, LinkMix mix) const;
  /// Cheapest of lp, mst, be, ring for this call.
  Algo best_algo(CollKind kind, double n, int P, int root, LinkMix mix) const;

  // Overloads taking the chain itself.
  double best_block(CollKind kind, double n, int P, int root, const Chain& c) const {
    return best_block(kind, n, P, root, LinkMix::of(c));
  }
  Algo best_algo(CollKind kind, double n, int P, int root, const Chain& c) const {
    return best_algo(kind, n, P, root, LinkMix::of(c));
  }

 private:
  double lp_alpha(LinkMix m) const;
  double lp_beta(LinkMix m) const;
};

/// Does `algo` implement `kind`? (ring: allreduce only.)
bool supports(Algo algo, CollKind kind);

}  // namespace lpsgd::comm
