// The α-β-γ cost model: predicted time of every algorithm, the best LP block
// size, and the choice behind `auto`.
//
//   α  latency of one message on a link (s)       per link kind: shm, mpi
//   β  time per byte on a link (s/B)              per link kind: shm, mpi
//   γ  time per byte of a reduce step (s/B)       per device
//
// LP is a pipeline: with k = ⌈n/b⌉ blocks it takes T = S·h + k·p, where
//   h = α + b(β [+ γ])  one block crossing one hop (+γ where the hop ends in a
//                       reduction): the start-up cost of a stage;
//   S = D−1 (bcast, reduce) or 2D−1 (allreduce: reduce to the middle, broadcast
//       back out), D the depth (hops from the farthest rank to the centre);
//   p = the steady-state period: the busiest resource's time per block.
// The period is where the stages' costs combine. On MPI links a node has one
// full-duplex NIC: a rank that receives s streams at once (a bcast/reduce root
// with neighbours on both sides; every inner rank of an allreduce, which takes
// partial sums from one side and results from the other) moves s·b bytes per
// block through it, and the allreduce centre also makes r = 2 reductions per
// block. On a network where each chain neighbour has its own full-duplex link
// (a ring or chain of point-to-point links, `mpi_neighbour_links = 1` in the
// calibration file, measured by calibration) no link carries two streams: s = 1, and an LP allreduce
// costs about n(β+γ) at any P. With one block in flight per link (W = 1) a rank receives, reduces
// and only then posts the next receive: p = α + s·bβ + r·bγ. With W ≥ 2 the
// next block arrives while the current one is reduced: p = max(α + s·bβ, r·bγ).
// On peer links the "transfer" is CPU work. Buffers from
// Communicator::alloc_shared are read by the neighbour in place, so a rank
// only reduces (γ) and copies what it receives into its own output (β_shm per
// byte covers a copy into a slot and one out, so a copy is β_shm/2). Each rank
// works on a core of its own, but copies stream through the memory the node's
// ranks share: p is the busiest rank's work per block or the node's total
// copying, whichever is longer (a 2-rank allreduce: the centre reduces while
// the other copies the results, p = max(γ, β_shm/2)·b; a 2-rank bcast: two
// copies at once through one memory, p = β_shm·b). Calibration measures β_shm
// and γ on buffers out of cache.
// Minimising S·h + k·α over b gives b* = √(nα / (S(β[+γ]))).
// Baselines: MST ⌈log P⌉(α + nβ); BE (scatter/reduce-scatter + allgather)
// ≈ 2 log P α + 2 n(P−1)/P β; ring allreduce 2(P−1)(α + nβ/P). Calibrated
// numbers come from `lpsgd bench --calibrate`, which writes the file read here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/types.hpp"

namespace lpsgd::comm {

class Chain;

/// Which link kinds a chain has; LP pays for the slowest of them.
struct LinkMix {
  bool shm = false;
  bool mpi = true;
  int node_ranks = 1;  ///< most ranks on one node (they share its memory)
  static LinkMix of(const Chain& chain);
};

/// Whether LP runs this collective with the centre alternating by block
/// between two ranks (allreduce of 2 ranks, LPSGD_LP_PAIR=1), which halves
/// each rank's reductions; the collective and the model both ask.
bool lp_shares_reductions(CollKind kind, int P);
/// LP on two ranks: where both ranks' buffers are in memory both can address
/// (one node, Communicator::alloc_shared), each does half the message and
/// writes the outputs directly, no pipeline (collectives/lp.cpp). On unless
/// LPSGD_LP_DIRECT=0; an allreduce with LPSGD_LP_PAIR=1 takes the pair instead.
bool lp_direct(CollKind kind, int P);

/// The ring allreduce's chunk (collectives/ring.cpp): each segment is cut
/// into chunks of about this many bytes, forwarded chunk by chunk. 256 KiB,
/// or LPSGD_RING_CHUNK_BYTES; the collective and the model both ask.
size_t ring_chunk_bytes();

class CostModel {
 public:
  static constexpr int kParams = 5;
  double alpha_shm = 1.0e-6, beta_shm = 1.0 / 5e9;
  double alpha_mpi = 3.0e-6, beta_mpi = 1.0 / 3e9;
  double gamma = 1.0 / 4e9;
  /// LP blocks in flight per link (the communicator's W): not calibrated, but
  /// it decides whether receiving and reducing overlap.
  int window = 1;
  /// The largest MPI message (the communicator's mpi_message_bytes): what a
  /// round-by-round schedule's emptied pipe costs per round across a
  /// network (predict: MST, BE). Not calibrated; 0 prices no such cost.
  size_t mpi_message = 0;
  /// MPI links: each chain neighbour has its own link (a ring network) rather
  /// than one NIC per node into a switch. Calibration key mpi_neighbour_links;
  /// calibrate() measures it where the chain spans three machines or more (a
  /// node streaming to both neighbours at once: each stream at the link's
  /// rate, or half of it through one port).
  bool mpi_neighbour_links = false;
  /// LP on two ranks of one node does half each (lp_direct, above): the
  /// environment's choice, which the collectives make too. The model
  /// assumes the buffers are shared (the trainer's and the bench's are);
  /// where they are not, LP pipelines and costs what the chain's formula says.
  bool lp_direct_pairs = lp_direct(CollKind::Bcast, 2);

  /// Measured numbers (read from a calibration file or just measured), not
  /// the built-in defaults; `source` says from where.
  bool calibrated = false;
  std::string source = "built-in defaults";

  /// How far a calibration's own numbers can be trusted (calibrate.cpp):
  /// High where every round of the measurement had its cores to itself and
  /// the rounds agreed; Low where not (`note` says why); Unknown for the
  /// built-in defaults and for files written before it was recorded.
  enum class Confidence { Unknown, Low, High };
  struct Quality {
    Confidence confidence = Confidence::Unknown;
    int rounds = 0;        ///< rounds the numbers come from
    double cpu_share = 0;  ///< least share of its core a measuring rank had in them
    double spread = 0;     ///< largest max/min over those rounds of β_shm, β_mpi, γ
    std::string note;      ///< why Low, e.g. "beside other work (cpu share 0.46)"
    std::string measured;  ///< when, on how many ranks and nodes
  } quality;
  /// The settings the numbers were measured under, as recorded in the file
  /// (0 / -1: not recorded): the choice depends on them as on the numbers, so
  /// a run whose own settings differ says so (settings_differ()).
  struct Settings {
    int window = 0;
    long long mpi_message = -1;
    int lp_direct = -1, lp_pair = -1;
    long long ring_chunk = 0;
  } measured_with;
  /// This process's settings (--window, the MPI message limit, LPSGD_LP_DIRECT,
  /// LPSGD_LP_PAIR, LPSGD_RING_CHUNK_BYTES): what calibrate() records.
  static Settings settings_now(int window, size_t mpi_message);
  /// "window 4 (measured with 2)" for each setting of `now` that the file
  /// recorded otherwise; "" where they agree or the file recorded none.
  std::string settings_differ(const Settings& now) const;

  /// One line for logs: where the numbers come from, how sure they are, and a
  /// fingerprint of every input of the choice (inputs_hash), so that two runs'
  /// logs show at a glance whether they chose from the same model.
  std::string describe() const;
  /// "confidence high: 3 rounds within 1.08x, cpu share 0.97; measured ...".
  std::string quality_text() const;
  /// FNV-1a over the numbers, the flags and the settings that predict() and
  /// best_algo() read: equal hashes, equal choices.
  uint32_t inputs_hash() const;

  /// Reads `path` (or the default path when empty); defaults if absent.
  static CostModel load_or_default(const std::string& path);
  /// The calibration at `path` if there is one, else the built-in defaults.
  static CostModel load_if_present(const std::string& path);
  /// Writes `name = value` lines, the numbers to the last bit (%.17g, so a
  /// run that reads the file back chooses exactly as the run that measured
  /// it), with the quality and settings; atomically (temporary file, rename).
  void save(const std::string& path) const;
  /// The default calibration file: $LPSGD_CALIBRATION, else
  /// ~/.cache/lpsgd/calibration-HOST.ini (one per machine: a shared home
  /// directory holds every node's own).
  /// $LPSGD_CALIBRATION, else ~/.cache/lpsgd/calibration-HOST.ini for one
  /// node, calibration-HOST+N-HASH.ini for N nodes (HOST the first node's
  /// name, HASH of all their names): one file per cluster, so the links of
  /// one set of nodes are not taken for another's. `nodes`: the node names in
  /// chain order (cluster_nodes()); empty means this host alone.
  static std::string default_path(const std::vector<std::string>& nodes = {});

  std::array<double, kParams> params() const { return {alpha_shm, beta_shm, alpha_mpi, beta_mpi, gamma}; }
  void set_params(const std::array<double, kParams>& p);

  /// Predicted seconds for n bytes on P ranks; NaN for the MPI library (unknown)
  /// and +inf for an unsupported (algorithm, collective) pair.
  double predict(Algo algo, CollKind kind, double n, int P, int root, double block,
                 LinkMix mix) const;
  /// LP's best block in bytes (not yet clamped to slots or element size).
  double best_block(CollKind kind, double n, int P, int root, LinkMix mix) const;
  /// The best block of a pipelined algorithm (lp or tree).
  double best_block(Algo algo, CollKind kind, double n, int P, int root, LinkMix mix) const;
  /// Cheapest of lp, tree, mst, be, ring for this call.
  Algo best_algo(CollKind kind, double n, int P, int root, LinkMix mix) const;

  // Overloads taking the chain itself.
  double best_block(CollKind kind, double n, int P, int root, const Chain& c) const {
    return best_block(kind, n, P, root, LinkMix::of(c));
  }
  Algo best_algo(CollKind kind, double n, int P, int root, const Chain& c) const {
    return best_algo(kind, n, P, root, LinkMix::of(c));
  }
  /// Seconds per byte of the slowest kind of link in the mix (what paces LP).
  double lp_beta(LinkMix m) const;

 private:
  double lp_alpha(LinkMix m) const;
  double lp_period(CollKind kind, int P, int root, double b, LinkMix m) const;
  double tree_time(CollKind kind, double n, int P, double b, LinkMix m) const;
};

/// Does `algo` implement `kind`? (ring: allreduce only.)
bool supports(Algo algo, CollKind kind);

}  // namespace lpsgd::comm
