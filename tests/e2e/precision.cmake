# --precision bf16 (issue 33): runs repeat bitwise and differ from fp32; the
# checkpoint records the precision and a resume may change it; a CPU without
# native bf16 is refused on every rank with one line.
add_test(NAME e2e.precision COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/precision.sh $<TARGET_FILE:lpsgd>)
set_tests_properties(e2e.precision PROPERTIES LABELS "e2e;mpi" TIMEOUT 300 PROCESSORS 2
  SKIP_RETURN_CODE 77 ENVIRONMENT "${LPSGD_E2E_ENV}")
