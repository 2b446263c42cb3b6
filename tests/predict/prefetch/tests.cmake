# Prefetching: the load queue of Edge-MoE §5.2 and the predictors that feed it.
moepolicy_add_test(test_predict_prefetch_queue SOURCES ${CMAKE_CURRENT_LIST_DIR}/prefetch_queue.cpp)
moepolicy_add_test(test_predict_short_horizon_predictor SOURCES ${CMAKE_CURRENT_LIST_DIR}/short_horizon_predictor.cpp)
moepolicy_add_test(test_predict_markov_predictor SOURCES ${CMAKE_CURRENT_LIST_DIR}/markov_predictor.cpp)
moepolicy_add_test(test_predict_transition_predictor SOURCES ${CMAKE_CURRENT_LIST_DIR}/transition_predictor.cpp)
moepolicy_add_test(test_predict_oracle_predictor SOURCES ${CMAKE_CURRENT_LIST_DIR}/oracle_predictor.cpp)
