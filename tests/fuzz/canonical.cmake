# Fuzzer of the canonical binary trace reader; seeds: the committed version-1 files.
moepolicy_add_fuzzer(fuzz_canonical
  SOURCE ${CMAKE_CURRENT_LIST_DIR}/fuzz_canonical.cpp
  SEEDS ${PROJECT_SOURCE_DIR}/tests/data/trace/small.mtrace
        ${PROJECT_SOURCE_DIR}/tests/data/trace/scores.mtrace)
