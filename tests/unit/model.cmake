# Unit tests of lib/model: model descriptions, spec strings, the ONNX reader
# and writer (issue 34), and the builder's use of given tensors.
lpsgd_unit_test(test_model SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model.cpp DEPS lpsgd_nn lpsgd_model)
# Built without ONNX, its ONNX cases skip: CTest then says so.
set_tests_properties(test_model PROPERTIES SKIP_REGULAR_EXPRESSION "${LPSGD_GTEST_SKIPPED}")
