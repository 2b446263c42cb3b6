# The JSONL routing-trace importers (moepolicy/io/{jsonl_format,granite_jsonl,vllm_jsonl,warp_jsonl}.hpp);
# the sources sit in tests/io/, mirroring include/moepolicy/io/.
set(_jsonl_tests ${CMAKE_CURRENT_LIST_DIR}/..)
moepolicy_add_test(test_io_jsonl_format SOURCES ${_jsonl_tests}/jsonl_format.cpp IO)
moepolicy_add_test(test_io_granite_jsonl SOURCES ${_jsonl_tests}/granite_jsonl.cpp IO)
moepolicy_add_test(test_io_vllm_jsonl SOURCES ${_jsonl_tests}/vllm_jsonl.cpp IO)
moepolicy_add_test(test_io_warp_jsonl SOURCES ${_jsonl_tests}/warp_jsonl.cpp IO)
unset(_jsonl_tests)
# The moepolicy routing trace as JSONL and CSV (moepolicy/io/trace_text.hpp).
moepolicy_add_test(test_io_trace_text SOURCES ${CMAKE_CURRENT_LIST_DIR}/../trace_text.cpp IO)
