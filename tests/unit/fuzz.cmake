# Regression cases of the fuzz harnesses (tests/fuzz): each input that once
# crashed or hung a harness goes through the same code path here and must end
# in an lpsgd::Error (or, for HDF5-internal cases, not reach HDF5's bug).
lpsgd_unit_test(test_fuzz_regressions
  SOURCES test_fuzz_regressions.cpp ${PROJECT_SOURCE_DIR}/app/train_options.cpp
  DEPS lpsgd_io lpsgd_train)
target_compile_definitions(test_fuzz_regressions PRIVATE
  LPSGD_FUZZ_REGRESSIONS="${PROJECT_SOURCE_DIR}/tests/fuzz/regressions")
