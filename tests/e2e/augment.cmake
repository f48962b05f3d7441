# lpsgd train --augment: 2 ranks, bit-exact stop + resume with augmentation,
# the config key, unaugmented evaluation, one-line errors for bad specs.
add_test(NAME e2e.augment COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/augment.sh $<TARGET_FILE:lpsgd>)
set_tests_properties(e2e.augment PROPERTIES LABELS "e2e;mpi" TIMEOUT 300 PROCESSORS 2
  ENVIRONMENT "${LPSGD_E2E_ENV}")
