# Checkpoint and restart: bit-exact resume (MLP and CNN, epoch end and mid-epoch),
# resume at another P, damaged checkpoints, SIGUSR1 to one rank.
add_test(NAME e2e.resume COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/resume.sh $<TARGET_FILE:lpsgd>)
set_tests_properties(e2e.resume PROPERTIES LABELS "e2e;mpi" TIMEOUT 600 PROCESSORS 2
  ENVIRONMENT "${LPSGD_E2E_ENV}")
