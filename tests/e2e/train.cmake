# lpsgd train: BSP equivalence across P, sync modes and algorithms; determinism;
# one-line errors for bad input.
add_test(NAME e2e.train COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/train.sh $<TARGET_FILE:lpsgd>)
set_tests_properties(e2e.train PROPERTIES LABELS "e2e;mpi" TIMEOUT 600 PROCESSORS 2
  ENVIRONMENT "${LPSGD_E2E_ENV}")
