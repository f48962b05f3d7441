# A Slurm job over 4 namespaces loses a node at a random step and finishes on
# the 3 left, resuming with the same global batch (needs root; skips
# otherwise). Alone: four nodes' daemons and ranks on two cores.
add_test(NAME e2e.elastic COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/elastic.sh $<TARGET_FILE:lpsgd>)
set_tests_properties(e2e.elastic PROPERTIES LABELS "e2e;netns;slurm" TIMEOUT 300 RUN_SERIAL ON
  SKIP_REGULAR_EXPRESSION "^SKIP:" ENVIRONMENT "${LPSGD_E2E_ENV}")
