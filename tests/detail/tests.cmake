moepolicy_add_test(test_detail_task_pool SOURCES ${CMAKE_CURRENT_LIST_DIR}/task_pool.cpp)
moepolicy_add_test(test_detail_span_meter SOURCES ${CMAKE_CURRENT_LIST_DIR}/span_meter.cpp)
