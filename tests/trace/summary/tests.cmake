moepolicy_add_test(test_trace_summary SOURCES ${CMAKE_CURRENT_LIST_DIR}/summary.cpp)
