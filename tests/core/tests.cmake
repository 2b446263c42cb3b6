moepolicy_add_test(test_core_error SOURCES ${CMAKE_CURRENT_LIST_DIR}/error.cpp)
moepolicy_add_test(test_core_units SOURCES ${CMAKE_CURRENT_LIST_DIR}/units.cpp)
moepolicy_add_test(test_core_ids SOURCES ${CMAKE_CURRENT_LIST_DIR}/ids.cpp)
moepolicy_add_test(test_core_model_shape SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_shape.cpp)
