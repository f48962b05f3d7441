# --optimizer adamw and lars (issue 46): bitwise resume at 2 ranks (lars in
# reduce-bcast with a bf16 wire), resume at another P, a checkpoint of
# another optimizer refused, bad values.
add_test(NAME e2e.optimizers COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/optimizers.sh $<TARGET_FILE:lpsgd>)
set_tests_properties(e2e.optimizers PROPERTIES LABELS "e2e;mpi" TIMEOUT 300 PROCESSORS 2
  ENVIRONMENT "${LPSGD_E2E_ENV}")
