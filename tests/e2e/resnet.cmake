# Residual networks with batch norm: --sync-bn's global statistics at P = 2
# and 3 against one rank, bit-exact resume mid-epoch, determinism, eval.
add_test(NAME e2e.resnet COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/resnet.sh $<TARGET_FILE:lpsgd>)
set_tests_properties(e2e.resnet PROPERTIES LABELS "e2e;mpi" TIMEOUT 600 PROCESSORS 2
  ENVIRONMENT "${LPSGD_E2E_ENV}")
