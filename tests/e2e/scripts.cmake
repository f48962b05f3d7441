# Every shell and Slurm batch script parses and passes shellcheck (skipped without it).
add_test(NAME e2e.scripts COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/scripts.sh)
set_tests_properties(e2e.scripts PROPERTIES LABELS e2e TIMEOUT 120 SKIP_RETURN_CODE 77)
