# DynaExq's policy side (DynaExq §3.5): interval hotness, budget initialisation, target sets.
moepolicy_add_test(test_predict_hotness SOURCES ${CMAKE_CURRENT_LIST_DIR}/hotness.cpp)
moepolicy_add_test(test_predict_precision_budget SOURCES ${CMAKE_CURRENT_LIST_DIR}/precision_budget.cpp)
moepolicy_add_test(test_predict_precision_target SOURCES ${CMAKE_CURRENT_LIST_DIR}/precision_target.cpp)
