# jobs/slurm/*.sbatch on a local Slurm cluster (jobs/local/slurm-cluster.sh):
# bench, a failing job, and a training job preempted by USR1, requeued and
# resumed bit-exactly. Skipped (77) where the cluster cannot start.
add_test(NAME e2e.slurm COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/slurm.sh $<TARGET_FILE:lpsgd>)
set_tests_properties(e2e.slurm PROPERTIES LABELS "e2e;slurm" TIMEOUT 300 PROCESSORS 2
  SKIP_RETURN_CODE 77 ENVIRONMENT "${LPSGD_E2E_ENV}")
