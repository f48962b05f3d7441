lpsgd_unit_test(test_cost_model SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cost_model.cpp DEPS lpsgd_comm)
lpsgd_unit_test(test_comm_tree SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_comm_tree.cpp DEPS lpsgd_comm)
