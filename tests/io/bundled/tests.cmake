moepolicy_add_test(test_io_bundled_traces SOURCES ${CMAKE_CURRENT_LIST_DIR}/bundled_traces.cpp IO)
moepolicy_add_test(test_io_read_trace SOURCES ${CMAKE_CURRENT_LIST_DIR}/read_trace.cpp IO)
