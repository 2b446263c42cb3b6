# Fuzzer of the canonical binary trace reader; seeds: the committed test files of both
# format versions and, whole, the bundled Granite trace (so mutations start from a real
# trace of 8496 rows).
#
# MAX_LEN 1 MiB, unlike the text readers' 4 KiB: libFuzzer cuts a longer corpus file to
# MAX_LEN when it loads it, and the bundled trace (535,800 bytes) cut short would fail the
# payload-size check before any column is read, so the real trace would never be mutated
# as a whole. The small seeds (104-416 bytes) and what grows from them keep most
# executions short; the whole trace costs about 18 ms per execution under ASan.
moepolicy_add_fuzzer(fuzz_canonical
  SOURCE ${CMAKE_CURRENT_LIST_DIR}/fuzz_canonical.cpp
  MAX_LEN 1048576
  SEEDS ${PROJECT_SOURCE_DIR}/tests/data/trace/small.mtrace
        ${PROJECT_SOURCE_DIR}/tests/data/trace/scores.mtrace
        ${PROJECT_SOURCE_DIR}/tests/data/trace/small-v1.mtrace
        ${PROJECT_SOURCE_DIR}/tests/data/trace/scores-v1.mtrace
  WHOLE_SEEDS ${PROJECT_SOURCE_DIR}/examples/traces/granite-3.1-1b-a400m/granite-3.1-1b-a400m.mtrace)
