moepolicy_add_test(test_stats_routing_stats SOURCES ${CMAKE_CURRENT_LIST_DIR}/routing_stats.cpp)
moepolicy_add_test(test_stats_analysis SOURCES ${CMAKE_CURRENT_LIST_DIR}/analysis.cpp)
