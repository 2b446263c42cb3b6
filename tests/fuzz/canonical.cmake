# Fuzzer of the canonical binary trace reader; seeds: the committed test files of both
# format versions and, whole, the bundled Granite trace (so mutations start from a real
# trace of 8496 rows).
#
# MAX_LEN 1 MiB, unlike the text readers' 4 KiB: libFuzzer cuts a longer corpus file to
# MAX_LEN when it loads it, and the bundled trace (535,800 bytes) cut short would fail the
# payload-size check before any column is read, so the real trace would never be mutated
# as a whole. The whole trace costs 26-31 ms of CPU per execution under ASan, so this
# campaign stays far from 10^7 executions; fuzz_canonical_small below is the deep one, on
# valid files small enough to run about 25 times as many executions per CPU second.
moepolicy_add_fuzzer(fuzz_canonical
  SOURCE ${CMAKE_CURRENT_LIST_DIR}/fuzz_canonical.cpp
  MAX_LEN 1048576
  SEEDS ${PROJECT_SOURCE_DIR}/tests/data/trace/small.mtrace
        ${PROJECT_SOURCE_DIR}/tests/data/trace/scores.mtrace
        ${PROJECT_SOURCE_DIR}/tests/data/trace/small-v1.mtrace
        ${PROJECT_SOURCE_DIR}/tests/data/trace/scores-v1.mtrace
  WHOLE_SEEDS ${PROJECT_SOURCE_DIR}/examples/traces/granite-3.1-1b-a400m/granite-3.1-1b-a400m.mtrace)

# The writer of the depth campaign's small seeds (tests/fuzz/seeds/canonical/README.md);
# built only on request: cmake --build BUILD --target make_canonical_seeds
add_executable(make_canonical_seeds EXCLUDE_FROM_ALL ${CMAKE_CURRENT_LIST_DIR}/make_canonical_seeds.cpp)
target_link_libraries(make_canonical_seeds PRIVATE moepolicy::io)

# The depth campaign of the same target: seeds of 16-240 rows cut from the bundled trace and
# written as valid files of both versions, with and without router scores, plus the
# hand-made files (tests/fuzz/seeds/canonical/README.md), at inputs of at most 16 KiB.
# Each seed has every section, several requests, both phases, several steps, layers and
# positions, so every header, section, per-row and per-entry check is reached, at a
# fraction of a whole-trace execution's cost.
moepolicy_add_fuzzer(fuzz_canonical_small
  SOURCE ${CMAKE_CURRENT_LIST_DIR}/fuzz_canonical.cpp
  MAX_LEN 16384
  WHOLE_SEEDS ${CMAKE_CURRENT_LIST_DIR}/seeds/canonical/granite-2req-24layers.mtrace
              ${CMAKE_CURRENT_LIST_DIR}/seeds/canonical/granite-2req-4layers-v1.mtrace
              ${CMAKE_CURRENT_LIST_DIR}/seeds/canonical/granite-2req-4layers-scores.mtrace
              ${CMAKE_CURRENT_LIST_DIR}/seeds/canonical/granite-2req-2layers-scores-v1.mtrace
              ${PROJECT_SOURCE_DIR}/tests/data/trace/small.mtrace
              ${PROJECT_SOURCE_DIR}/tests/data/trace/scores.mtrace
              ${PROJECT_SOURCE_DIR}/tests/data/trace/small-v1.mtrace
              ${PROJECT_SOURCE_DIR}/tests/data/trace/scores-v1.mtrace)

# The target's body without libFuzzer or sanitizers, optimised, for timing and `perf`
# (tests/fuzz/replay_inputs.cpp); built only on request.
add_executable(fuzz_canonical_replay EXCLUDE_FROM_ALL ${CMAKE_CURRENT_LIST_DIR}/fuzz_canonical.cpp
                                                      ${CMAKE_CURRENT_LIST_DIR}/replay_inputs.cpp)
target_link_libraries(fuzz_canonical_replay PRIVATE moepolicy::io)
target_compile_options(fuzz_canonical_replay PRIVATE -O2 -g)
