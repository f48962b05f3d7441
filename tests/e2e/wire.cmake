# --wire bf16/fp16: bitwise repeatable, close to fp32 but not equal, the wire
# type in the log and the checkpoint.
add_test(NAME e2e.wire COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/wire.sh $<TARGET_FILE:lpsgd>)
set_tests_properties(e2e.wire PROPERTIES LABELS "e2e;mpi" TIMEOUT 300 PROCESSORS 2
  ENVIRONMENT "${LPSGD_E2E_ENV}")
