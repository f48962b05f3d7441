# The SimGrid SMPI bench (jobs/smpi/build.sh builds it into the test's own
# directory, incrementally) at small P with --check. Skipped without SimGrid.
add_test(NAME e2e.smpi COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/smpi.sh ${CMAKE_CURRENT_BINARY_DIR}/smpi-build)
set_tests_properties(e2e.smpi PROPERTIES LABELS e2e TIMEOUT 600 PROCESSORS 2 SKIP_RETURN_CODE 77 RESOURCE_LOCK smpi-build
  ENVIRONMENT "JOBS=2")
# auto within 1.10 of the best fixed algorithm in a few simulated cells
# (switch and ring network; the SMPI build shared with e2e.smpi).
add_test(NAME e2e.smpi_auto COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/smpi_auto.sh ${CMAKE_CURRENT_BINARY_DIR}/smpi-build)
set_tests_properties(e2e.smpi_auto PROPERTIES LABELS e2e TIMEOUT 600 PROCESSORS 2 SKIP_RETURN_CODE 77
  ENVIRONMENT "JOBS=2" DEPENDS e2e.smpi RESOURCE_LOCK smpi-build)
