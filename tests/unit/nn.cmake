# Unit tests of lib/nn, lib/train and their CPU kernels (issue 5).
lpsgd_unit_test(test_nn_kernels SOURCES test_nn_kernels.cpp DEPS lpsgd_device)
lpsgd_unit_test(test_nn_gradcheck SOURCES test_nn_gradcheck.cpp DEPS lpsgd_nn TIMEOUT 300)
lpsgd_unit_test(test_nn_model SOURCES test_nn_model.cpp DEPS lpsgd_nn)
