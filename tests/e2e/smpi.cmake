# The SimGrid SMPI bench (jobs/smpi/build.sh builds it into the test's own
# directory, incrementally) at small P with --check. Skipped without SimGrid.
add_test(NAME e2e.smpi COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/smpi.sh ${CMAKE_CURRENT_BINARY_DIR}/smpi-build)
set_tests_properties(e2e.smpi PROPERTIES LABELS e2e TIMEOUT 600 PROCESSORS 2 SKIP_RETURN_CODE 77
  ENVIRONMENT "JOBS=2")
