// Calibration: measure α and β of each link kind by streaming blocks of two
// sizes between chain neighbours through the link's W slots (the per-block
// period of one pipeline hop, t(b) = α + b·β), and γ of the device's reduce
// step, to fill the cost model.
//
// Noise cannot be allowed to decide: a calibration is kept in a file that
// every later job on the same links reads, and one made beside another job
// once chose algorithms 1.5-5x slower for all of them. So every measurement
// is repeated (the median of its repetitions), the whole set is measured in
// rounds (each number the median over the rounds), and each repetition records
// the share of its core every measuring rank had (thread cpu time over wall
// time: polling ranks run all the time unless something else runs). A
// repetition without most of a core is set aside; a calibration whose rounds
// did not have their cores, or disagree, says so (CostModel::Quality: Low,
// with the reason), and the communicator then neither trusts it over a sure
// one nor keeps it in place of one (prefer_fresh).
#pragma once

#include <mpi.h>

#include <string>

#include "comm/communicator.hpp"
#include "comm/cost_model.hpp"
#include "device/device.hpp"

namespace lpsgd::comm {

/// Collective over `parent` (needs at least 2 ranks for α and β; with one rank
/// only γ is measured and the rest keep their defaults). Every rank returns
/// the same model, its quality and the settings it was measured under
/// (`window`: LP blocks in flight per link; `mpi_message`: the largest MPI
/// message, as the communicator will cut them) included.
CostModel calibrate(MPI_Comm parent, Device& dev, int ranks_per_node, int reps = 50, int window = 4,
                    size_t mpi_message = default_mpi_message_bytes());

/// Whether a cost model still describes a communicator's links.
struct LinkCheck {
  /// Fits: within tolerance; Differs: a link measured with a core to itself
  /// is outside it; Busy: a measurement without its core, which cannot judge.
  enum Result { Fits, Differs, Busy } result = Fits;
  LinkKind kind = LinkKind::Mpi;      ///< the link that differs (or was busy)
  double measured_s = 0, predicted_s = 0;  ///< its 256 KiB block's period, both ways
  double cpu_share = 1;               ///< the least share of a core while measuring it
};

/// Streams 256 KiB blocks over the chain's first MPI link (some 10 to 100 ms
/// across a network) and its first peer link (under a millisecond), each the
/// median of five streams, and compares each period with m's α + b·β, within
/// a factor of 1.5 (MPI) or 3 (peer links). Collective over c; every rank gets
/// the same answer.
LinkCheck check_links(Communicator& c, const CostModel& m);

/// Of two calibrations of the same links, whether to use (and keep) `fresh`
/// rather than `old`: where there was none, where fresh is sure of itself
/// (Confidence::High), or where neither is and fresh's ranks had more of their
/// cores. A fresh one that is not sure never replaces a sure one. `why` gets
/// the reason, for the log. The same answer on every rank (it reads only
/// numbers they share).
bool prefer_fresh(const CostModel& old, const CostModel& fresh, std::string* why = nullptr);

}  // namespace lpsgd::comm
