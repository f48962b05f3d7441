# lib/comm: the collective oracle matrix on plain, MPI-only and mixed chains,
# and error handling (mismatched calls, stalls).
# The oracle (one lpsgd collective checked against the MPI library's) is shared
# with the random soak (tests/soak).
add_library(lpsgd_collective_oracle STATIC ${CMAKE_CURRENT_LIST_DIR}/collective_oracle.cpp)
target_include_directories(lpsgd_collective_oracle PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(lpsgd_collective_oracle PUBLIC lpsgd_comm PRIVATE lpsgd_warnings)
set(comm_test_src ${CMAKE_CURRENT_LIST_DIR}/test_collectives.cpp)
lpsgd_mpi_test(test_collectives SOURCES ${comm_test_src} DEPS lpsgd_collective_oracle
  RANKS 1 2 3 4 5 6 7 8 TIMEOUT 600)
lpsgd_mpi_test(test_collectives SOURCES ${comm_test_src} DEPS lpsgd_comm
  RANKS 2 3 4 SUFFIX links-mpi ENV "LPSGD_TEST_LINKS=mpi" TIMEOUT 600)
lpsgd_mpi_test(test_collectives SOURCES ${comm_test_src} DEPS lpsgd_comm
  RANKS 4 5 SUFFIX rpn2 ENV "LPSGD_RANKS_PER_NODE=2" TIMEOUT 600)
lpsgd_mpi_test(test_collectives SOURCES ${comm_test_src} DEPS lpsgd_comm
  RANKS 6 7 SUFFIX rpn3 ENV "LPSGD_RANKS_PER_NODE=3" TIMEOUT 600)
# LP allreduce of 2 ranks with one centre, as where the ranks cannot write
# each other's outputs (LPSGD_LP_DIRECT=0), and with the centre alternating by
# block (LPSGD_LP_PAIR=1).
lpsgd_mpi_test(test_collectives SOURCES ${comm_test_src} DEPS lpsgd_comm
  RANKS 2 SUFFIX lp-one-centre ENV "LPSGD_LP_DIRECT=0" TIMEOUT 600)
lpsgd_mpi_test(test_collectives SOURCES ${comm_test_src} DEPS lpsgd_comm
  RANKS 2 SUFFIX lp-pair ENV "LPSGD_LP_PAIR=1" TIMEOUT 600)
lpsgd_mpi_test(test_collectives SOURCES ${comm_test_src} DEPS lpsgd_comm
  RANKS 2 SUFFIX lp-pair-links-mpi ENV "LPSGD_LP_PAIR=1;LPSGD_TEST_LINKS=mpi" TIMEOUT 600)
# Every LP output written past the caches (non-temporal stores), as the
# outputs of messages larger than half the last-level cache are.
lpsgd_mpi_test(test_collectives SOURCES ${comm_test_src} DEPS lpsgd_comm
  RANKS 2 3 SUFFIX uncached ENV "LPSGD_UNCACHED_BYTES=0" TIMEOUT 600)
lpsgd_mpi_test(test_collectives SOURCES ${comm_test_src} DEPS lpsgd_comm
  RANKS 2 SUFFIX lp-pair-uncached ENV "LPSGD_UNCACHED_BYTES=0;LPSGD_LP_PAIR=1" TIMEOUT 600)
# MPI traffic through pinned host staging, as on a GPU without CUDA-aware MPI.
lpsgd_mpi_test(test_collectives SOURCES ${comm_test_src} DEPS lpsgd_comm
  RANKS 3 SUFFIX staged ENV "LPSGD_RANKS_PER_NODE=2;LPSGD_TEST_STAGE_MPI=1" TIMEOUT 600)
lpsgd_mpi_test(test_collectives SOURCES ${comm_test_src} DEPS lpsgd_comm
  RANKS 2 SUFFIX links-mpi-staged ENV "LPSGD_TEST_LINKS=mpi;LPSGD_TEST_STAGE_MPI=1" TIMEOUT 600)
# Every block and baseline region as several MPI messages of at most 1000
# bytes (CommOptions::mpi_message_bytes), on plain and staged MPI links.
lpsgd_mpi_test(test_collectives SOURCES ${comm_test_src} DEPS lpsgd_comm
  RANKS 3 SUFFIX small-messages ENV "LPSGD_TEST_LINKS=mpi;LPSGD_MPI_MESSAGE_BYTES=1000" TIMEOUT 600)
lpsgd_mpi_test(test_collectives SOURCES ${comm_test_src} DEPS lpsgd_comm
  RANKS 3 SUFFIX staged-small-messages
  ENV "LPSGD_RANKS_PER_NODE=2;LPSGD_TEST_STAGE_MPI=1;LPSGD_MPI_MESSAGE_BYTES=1000" TIMEOUT 600)
# The ring cut into chunks of 64 bytes: many chunks in flight, and the
# allgather's receives into out waiting for this rank's sends from there.
lpsgd_mpi_test(test_collectives SOURCES ${comm_test_src} DEPS lpsgd_comm
  RANKS 3 4 SUFFIX ring-chunks ENV "LPSGD_RING_CHUNK_BYTES=64" TIMEOUT 600)
# The collectives' reductions of every type (the 16-bit ones compiled per
# instruction set) at each level this CPU runs.
lpsgd_isa_variants(test_collectives.p3 LABELS mpi PROCESSORS 2 TIMEOUT 300
  COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 3 ${LPSGD_MPIEXEC_FLAGS} ${MPIEXEC_PREFLAGS}
          $<TARGET_FILE:test_collectives> ${MPIEXEC_POSTFLAGS}
          --gtest_filter=Collectives.SmallCounts*:Collectives.SixteenBit*:Collectives.FloatInput*)
lpsgd_mpi_test(test_comm_errors SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_comm_errors.cpp
  DEPS lpsgd_comm RANKS 2 3 5 TIMEOUT 120)
# The trainer's control channel (lib/train/control.cpp).
lpsgd_mpi_test(test_control SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_control.cpp
  DEPS lpsgd_train RANKS 1 2 3 TIMEOUT 120)
# Calibration on real ranks: one model and one verdict everywhere; the start-up
# check tells a wrong calibration from a busy node.
lpsgd_mpi_test(test_calibrate SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_calibrate.cpp DEPS lpsgd_comm
  RANKS 2 3 TIMEOUT 300)
lpsgd_mpi_test(test_calibrate SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_calibrate.cpp DEPS lpsgd_comm
  RANKS 4 SUFFIX rpn2 ENV "LPSGD_RANKS_PER_NODE=2" TIMEOUT 300)
