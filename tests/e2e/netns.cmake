# A 4-node cluster of network namespaces (needs root; skips otherwise). Alone:
# its ranks and TCP links would crowd other tests' on two cores.
add_test(NAME e2e.netns COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/netns.sh $<TARGET_FILE:lpsgd>)
set_tests_properties(e2e.netns PROPERTIES LABELS "e2e;netns" TIMEOUT 400 RUN_SERIAL ON
  SKIP_REGULAR_EXPRESSION "^SKIP:" ENVIRONMENT "${LPSGD_E2E_ENV}")
