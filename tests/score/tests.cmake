moepolicy_add_test(test_score_importance SOURCES ${CMAKE_CURRENT_LIST_DIR}/importance.cpp)
