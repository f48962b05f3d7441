add_test(NAME e2e.device-summary
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/device_summary.sh $<TARGET_FILE:lpsgd>)
set_tests_properties(e2e.device-summary PROPERTIES LABELS "e2e;mpi" TIMEOUT 300 PROCESSORS 2
  ENVIRONMENT "${LPSGD_E2E_ENV}")
