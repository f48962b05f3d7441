// Calibration: measure α and β of each link kind by streaming blocks of two
// sizes between chain neighbours through the link's W slots (the per-block
// period of one pipeline hop, t(b) = α + b·β), and γ of the device's reduce
// step, to fill the cost model.
#pragma once

#include <mpi.h>

#include "comm/cost_model.hpp"
#include "device/device.hpp"

namespace lpsgd::comm {

class Communicator;

/// Collective over `parent` (needs at least 2 ranks for α and β; with one rank
/// only γ is measured and the rest keep their defaults). Every rank returns
/// the same model.
CostModel calibrate(MPI_Comm parent, Device& dev, int ranks_per_node, int reps = 50);

/// Whether `m` still describes c's links: streams a few 256 KiB blocks over
/// the chain's first MPI link (some 10 to 100 ms) and its first peer link
/// (under a millisecond) and compares each period with m's α + b·β, within a
/// factor of 1.5 (MPI) or 3 (peer links). Collective over c; every rank gets
/// the same answer. Where one does not fit, sets `measured_s`, `predicted_s`
/// and `kind` to its two periods and its kind.
bool links_match(Communicator& c, const CostModel& m, double* measured_s = nullptr,
                 double* predicted_s = nullptr, LinkKind* kind = nullptr);

}  // namespace lpsgd::comm
