# Expert-parallel placement: DeepSeek EPLB reproduced, the lower bound, the exact solver,
# our rebalancer (fresh, migration-aware, hysteresis) on random and real load matrices,
# load-aware token dispatch among replicas, and the engines' placement files.
moepolicy_add_test(test_ep_problem SOURCES ${CMAKE_CURRENT_LIST_DIR}/problem.cpp)
moepolicy_add_test(test_ep_deepseek_eplb SOURCES ${CMAKE_CURRENT_LIST_DIR}/deepseek_eplb.cpp)
moepolicy_add_test(test_ep_lower_bound SOURCES ${CMAKE_CURRENT_LIST_DIR}/lower_bound.cpp)
moepolicy_add_test(test_ep_exact SOURCES ${CMAKE_CURRENT_LIST_DIR}/exact.cpp)
moepolicy_add_test(test_ep_rebalancer SOURCES ${CMAKE_CURRENT_LIST_DIR}/rebalancer.cpp)
moepolicy_add_test(test_ep_dispatch SOURCES ${CMAKE_CURRENT_LIST_DIR}/dispatch.cpp)
moepolicy_add_test(test_ep_formats SOURCES ${CMAKE_CURRENT_LIST_DIR}/formats.cpp)
moepolicy_add_test(test_ep_real_matrices SOURCES ${CMAKE_CURRENT_LIST_DIR}/real_matrices.cpp IO)
# count_allocations.hpp replaces operator new with malloc; GCC flags the free it inlines.
target_compile_options(test_ep_rebalancer PRIVATE $<$<CXX_COMPILER_ID:GNU>:-Wno-mismatched-new-delete>)
target_compile_options(test_ep_dispatch PRIVATE $<$<CXX_COMPILER_ID:GNU>:-Wno-mismatched-new-delete>)
