# Core tests of moepolicy/trace/tables.hpp (no I/O dependency).
moepolicy_add_test(test_trace_tables SOURCES ${CMAKE_CURRENT_LIST_DIR}/../tables.cpp)
