moepolicy_add_test(test_quant_bit_allocation SOURCES ${CMAKE_CURRENT_LIST_DIR}/bit_allocation.cpp)
moepolicy_add_test(test_quant_prefix_split SOURCES ${CMAKE_CURRENT_LIST_DIR}/prefix_split.cpp)
moepolicy_add_test(test_quant_exact_allocation SOURCES ${CMAKE_CURRENT_LIST_DIR}/exact_allocation.cpp)
moepolicy_add_test(test_quant_real_loss_table SOURCES ${CMAKE_CURRENT_LIST_DIR}/real_loss_table.cpp IO)
