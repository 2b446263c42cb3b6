# Fuzzer of the canonical binary trace reader; seeds: the committed test files of both
# format versions and, whole, the bundled Granite trace (so mutations start from a real
# trace of 8496 rows; hence the larger maximum input).
moepolicy_add_fuzzer(fuzz_canonical
  SOURCE ${CMAKE_CURRENT_LIST_DIR}/fuzz_canonical.cpp
  MAX_LEN 1048576
  SEEDS ${PROJECT_SOURCE_DIR}/tests/data/trace/small.mtrace
        ${PROJECT_SOURCE_DIR}/tests/data/trace/scores.mtrace
        ${PROJECT_SOURCE_DIR}/tests/data/trace/small-v1.mtrace
        ${PROJECT_SOURCE_DIR}/tests/data/trace/scores-v1.mtrace
  WHOLE_SEEDS ${PROJECT_SOURCE_DIR}/examples/traces/granite-3.1-1b-a400m/granite-3.1-1b-a400m.mtrace)
