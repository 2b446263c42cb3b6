moepolicy_add_test(test_quant_bit_allocation SOURCES ${CMAKE_CURRENT_LIST_DIR}/bit_allocation.cpp)
moepolicy_add_test(test_quant_prefix_split SOURCES ${CMAKE_CURRENT_LIST_DIR}/prefix_split.cpp)
moepolicy_add_test(test_quant_exact_allocation SOURCES ${CMAKE_CURRENT_LIST_DIR}/exact_allocation.cpp)
moepolicy_add_test(test_quant_real_loss_table SOURCES ${CMAKE_CURRENT_LIST_DIR}/real_loss_table.cpp IO)
# count_allocations.hpp replaces operator new with malloc; GCC flags the free it inlines.
target_compile_options(test_quant_prefix_split PRIVATE $<$<CXX_COMPILER_ID:GNU>:-Wno-mismatched-new-delete>)
target_compile_options(test_quant_exact_allocation PRIVATE $<$<CXX_COMPILER_ID:GNU>:-Wno-mismatched-new-delete>)
