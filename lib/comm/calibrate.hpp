// Calibration: measure α and β of each link kind by streaming blocks of two
// sizes between chain neighbours through the link's W slots (the per-block
// period of one pipeline hop, t(b) = α + b·β), and γ of the device's reduce
// step, to fill the cost model.
#pragma once

#include <mpi.h>

#include "comm/cost_model.hpp"
#include "device/device.hpp"

namespace lpsgd::comm {

/// Collective over `parent` (needs at least 2 ranks for α and β; with one rank
/// only γ is measured and the rest keep their defaults). Every rank returns
/// the same model.
CostModel calibrate(MPI_Comm parent, Device& dev, int ranks_per_node, int reps = 50);

}  // namespace lpsgd::comm
