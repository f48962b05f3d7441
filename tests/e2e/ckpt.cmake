# lpsgd ckpt: info and verify on checkpoints written by a test helper, intact
# and damaged. make_ckpt is a test-only program (not installed).
add_executable(make_ckpt ${CMAKE_CURRENT_SOURCE_DIR}/../tools/make_ckpt.cpp)
target_link_libraries(make_ckpt PRIVATE lpsgd_io lpsgd_warnings)
set_target_properties(make_ckpt PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
add_test(NAME e2e.ckpt
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ckpt.sh $<TARGET_FILE:lpsgd> $<TARGET_FILE:make_ckpt>)
set_tests_properties(e2e.ckpt PROPERTIES LABELS e2e TIMEOUT 120 ENVIRONMENT "${LPSGD_E2E_ENV}")
