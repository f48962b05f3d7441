# One slurmd per network namespace (needs root; skips otherwise): sbatch
# --nodes=4 spans namespaces and trains bitwise as pretend nodes do. Alone: its
# four nodes' daemons and ranks would crowd other tests' on two cores.
add_test(NAME e2e.netns_slurm COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/netns_slurm.sh $<TARGET_FILE:lpsgd>)
set_tests_properties(e2e.netns_slurm PROPERTIES LABELS "e2e;netns;slurm" TIMEOUT 300 RUN_SERIAL ON
  SKIP_REGULAR_EXPRESSION "^SKIP:" ENVIRONMENT "${LPSGD_E2E_ENV}")
