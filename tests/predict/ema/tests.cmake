moepolicy_add_test(test_predict_ema_load_predictor SOURCES ${CMAKE_CURRENT_LIST_DIR}/ema_load_predictor.cpp)
moepolicy_add_test(test_predict_ema_accuracy SOURCES ${CMAKE_CURRENT_LIST_DIR}/accuracy.cpp IO)
