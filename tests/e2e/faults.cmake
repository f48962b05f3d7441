# Faults during training under mpirun (faults.sh): a rank killed, a rank
# stopped, a full or read-only checkpoint directory (skipped, 77, where a
# tmpfs cannot be mounted), a data chunk damaged mid-run. One test each.
foreach(fault kill stop disk data)
  add_test(NAME e2e.faults.${fault}
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/faults.sh $<TARGET_FILE:lpsgd> ${fault})
  set_tests_properties(e2e.faults.${fault} PROPERTIES LABELS "e2e;mpi" TIMEOUT 180 PROCESSORS 2
    SKIP_RETURN_CODE 77 ENVIRONMENT "${LPSGD_E2E_ENV}")
endforeach()
