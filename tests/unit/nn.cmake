# Unit tests of lib/nn, lib/train and their CPU kernels (issue 5).
lpsgd_unit_test(test_nn_kernels SOURCES test_nn_kernels.cpp DEPS lpsgd_device)
lpsgd_unit_test(test_nn_plans SOURCES test_nn_plans.cpp DEPS lpsgd_device)
lpsgd_unit_test(test_nn_gradcheck SOURCES test_nn_gradcheck.cpp DEPS lpsgd_nn TIMEOUT 300)
lpsgd_unit_test(test_nn_model SOURCES test_nn_model.cpp DEPS lpsgd_nn)
lpsgd_unit_test(test_train SOURCES test_train.cpp DEPS lpsgd_train TIMEOUT 300)

# Not a test: forward+backward throughput of a model (samples/s), for reports.
add_executable(bench_nn_step ${CMAKE_CURRENT_SOURCE_DIR}/../bench/nn_step.cpp)
target_link_libraries(bench_nn_step PRIVATE lpsgd_train lpsgd_warnings)
lpsgd_unit_test(test_stop_signals SOURCES test_stop_signals.cpp DEPS lpsgd_nn)
# The narrower loops of 2x2 pooling, which wider CPUs skip otherwise.
foreach(loop avx2 scalar)
  add_test(NAME test_nn_kernels.pool_${loop} COMMAND test_nn_kernels --gtest_filter=NnKernels.MaxPool*)
  set_tests_properties(test_nn_kernels.pool_${loop} PROPERTIES LABELS unit TIMEOUT 120
                       ENVIRONMENT LPSGD_POOL_LOOP=${loop})
endforeach()
