# The expert-cache router (Edge-MoE Alg. 1).
moepolicy_add_test(test_route_expert_cache_router SOURCES ${CMAKE_CURRENT_LIST_DIR}/expert_cache_router.cpp)
