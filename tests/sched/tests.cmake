moepolicy_add_test(test_sched_problem SOURCES ${CMAKE_CURRENT_LIST_DIR}/problem.cpp)
moepolicy_add_test(test_sched_solvers SOURCES ${CMAKE_CURRENT_LIST_DIR}/solvers.cpp)
moepolicy_add_test(test_sched_real_traces SOURCES ${CMAKE_CURRENT_LIST_DIR}/real_traces.cpp IO)
moepolicy_add_test(test_sched_alloc SOURCES ${CMAKE_CURRENT_LIST_DIR}/alloc.cpp)
