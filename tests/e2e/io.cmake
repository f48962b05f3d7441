# lpsgd data: make, inspect and load datasets; bad files give one-line errors.
add_test(NAME e2e.data COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/data.sh $<TARGET_FILE:lpsgd>)
set_tests_properties(e2e.data PROPERTIES LABELS e2e TIMEOUT 300
  ENVIRONMENT "${LPSGD_E2E_ENV}")
