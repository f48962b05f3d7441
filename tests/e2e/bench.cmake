add_test(NAME e2e.bench COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/bench.sh $<TARGET_FILE:lpsgd>)
set_tests_properties(e2e.bench PROPERTIES LABELS "e2e;mpi" TIMEOUT 300 PROCESSORS 2
  ENVIRONMENT "${LPSGD_E2E_ENV}")
