moepolicy_add_test(test_detail_task_pool SOURCES ${CMAKE_CURRENT_LIST_DIR}/task_pool.cpp)
