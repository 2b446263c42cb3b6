# The two-pointer CPU-load balancer (Edge-MoE Alg. 2) and its exact counterparts.
moepolicy_add_test(test_balance_two_pointer SOURCES ${CMAKE_CURRENT_LIST_DIR}/two_pointer.cpp)
