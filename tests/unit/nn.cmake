# Unit tests of lib/nn, lib/train and their CPU kernels (issue 5).
lpsgd_unit_test(test_nn_kernels SOURCES test_nn_kernels.cpp DEPS lpsgd_device)
lpsgd_unit_test(test_nn_plans SOURCES test_nn_plans.cpp DEPS lpsgd_device)
lpsgd_unit_test(test_nn_gradcheck SOURCES test_nn_gradcheck.cpp DEPS lpsgd_nn TIMEOUT 300)
lpsgd_unit_test(test_nn_model SOURCES test_nn_model.cpp DEPS lpsgd_nn)
# PyTorch's batch-norm values (fixtures/make_batchnorm_torch.py writes them).
target_compile_definitions(test_nn_model PRIVATE LPSGD_FIXTURES="${CMAKE_CURRENT_SOURCE_DIR}/fixtures")
lpsgd_unit_test(test_train SOURCES test_train.cpp DEPS lpsgd_train TIMEOUT 300)
# AdamW and LARS against torch.optim.AdamW and NumPy (fixtures/make_optimizers_ref.py
# writes the values), at every instruction-set level (below).
lpsgd_unit_test(test_optimizers SOURCES test_optimizers.cpp DEPS lpsgd_train)
target_compile_definitions(test_optimizers PRIVATE LPSGD_FIXTURES="${CMAKE_CURRENT_SOURCE_DIR}/fixtures")

# Not a test: forward+backward throughput of a model (samples/s), for reports.
add_executable(bench_nn_step ${CMAKE_CURRENT_SOURCE_DIR}/../bench/nn_step.cpp)
target_link_libraries(bench_nn_step PRIVATE lpsgd_train lpsgd_warnings)
lpsgd_unit_test(test_stop_signals SOURCES test_stop_signals.cpp DEPS lpsgd_nn)
# The kernels' narrower paths (2x2 pooling's loops; the oneDNN plans at a
# capped ISA, bf16 ones included), which wider CPUs skip otherwise.
foreach(t test_nn_kernels test_nn_plans test_optimizers)
  target_link_libraries(${t} PRIVATE lpsgd_isa_gate)
  lpsgd_isa_variants(${t} COMMAND ${t} LABELS unit)
endforeach()
