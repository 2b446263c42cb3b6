# Tests of the trace core: the routing trace itself, the canonical binary format and the
# CSV export (sources one folder up, beside the other trace tests).
set(_trace_dir ${CMAKE_CURRENT_LIST_DIR}/..)
moepolicy_add_test(test_trace_routing_trace SOURCES ${_trace_dir}/routing_trace.cpp)
moepolicy_add_test(test_trace_canonical SOURCES ${_trace_dir}/canonical.cpp)
moepolicy_add_test(test_trace_csv_export SOURCES ${_trace_dir}/csv_export.cpp)
