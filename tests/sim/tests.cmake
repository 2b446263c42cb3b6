moepolicy_add_test(test_sim_gpu_ndp SOURCES ${CMAKE_CURRENT_LIST_DIR}/gpu_ndp.cpp)
moepolicy_add_test(test_sim_gpu_ndp_replay SOURCES ${CMAKE_CURRENT_LIST_DIR}/gpu_ndp_replay.cpp)
moepolicy_add_test(test_sim_trimoe_replay SOURCES ${CMAKE_CURRENT_LIST_DIR}/trimoe_replay.cpp)
