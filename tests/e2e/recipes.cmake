# Training recipes: gradient accumulation (one exchange a step, P x K = P'),
# a global batch kept across a resume on another P, gradient clipping.
add_test(NAME e2e.recipes COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/recipes.sh $<TARGET_FILE:lpsgd>)
set_tests_properties(e2e.recipes PROPERTIES LABELS "e2e;mpi" TIMEOUT 600 PROCESSORS 2
  ENVIRONMENT "${LPSGD_E2E_ENV}")
