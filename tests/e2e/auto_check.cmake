# --algo auto checks its choices on the run's own steps: a model that
# mispredicts is repaired on every rank at the same step, the state is in the
# checkpoint, and a resume during the trial or after it repeats the run.
add_test(NAME e2e.auto_check COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/auto_check.sh $<TARGET_FILE:lpsgd>)
set_tests_properties(e2e.auto_check PROPERTIES LABELS "e2e;mpi" TIMEOUT 300 PROCESSORS 2
  ENVIRONMENT "${LPSGD_E2E_ENV}")
