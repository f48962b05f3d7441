// lpsgd-bench-smpi: `lpsgd bench` built with smpicxx, for SimGrid's smpirun.
// Takes the bench's options directly: smpirun -np P ... lpsgd-bench-smpi --op ...
#include "app/commands.hpp"
#include "app/entry.hpp"

int main(int argc, char** argv) { return lpsgd::app::run_mpi_main(argc, argv, lpsgd::app::run_bench); }
