# Fuzzers of the JSONL importers: seeded from the recorded traces (when ../shared is
# present) and from the small hand-made inputs of tests/data/io/, so the corpus is never
# empty.
#
# MAX_LEN 4096: a record line is 150-600 bytes, so 4 KiB holds the metadata line and 6-25
# records, enough for every per-line check and for the checks across lines (order, step
# continuity, one request); longer inputs repeat the same code per line and only slow each
# execution (libFuzzer truncates longer seeds to their first 4 KiB when it loads them).
# The seed heads are cut to whole lines that fit in 4 KiB (10 Granite lines, 25 vLLM
# lines, 16 trace lines), so every seed is a valid trace, not one cut mid-record.
set(_jsonl_max_len 4096)
set(_io_data ${PROJECT_SOURCE_DIR}/tests/data/io)
set(_granite_traces ${MOEPOLICY_SHARED_TRACES}/granite-3.1-1b-a400m)
set(_mixtral_traces ${MOEPOLICY_SHARED_TRACES}/mixtral-8x7b-decode)

moepolicy_add_fuzzer(fuzz_granite_jsonl
  SOURCE ${CMAKE_CURRENT_LIST_DIR}/fuzz_granite_jsonl.cpp
  MAX_LEN ${_jsonl_max_len}
  SEED_LINES 10
  SEEDS ${_granite_traces}/00-cal-factual-01.jsonl
        ${_granite_traces}/05-eval-factual-02.jsonl
        ${_granite_traces}/09-eval-summary-01.jsonl
        ${_io_data}/granite_a.jsonl
        ${_io_data}/granite_b.jsonl
        ${_io_data}/granite_truncated.jsonl
        ${_io_data}/granite_version2.jsonl)

moepolicy_add_fuzzer(fuzz_vllm_jsonl
  SOURCE ${CMAKE_CURRENT_LIST_DIR}/fuzz_vllm_jsonl.cpp
  MAX_LEN ${_jsonl_max_len}
  SEED_LINES 25
  SEEDS ${_mixtral_traces}/humaneval_2_routing.jsonl
        ${_mixtral_traces}/routing_raw.jsonl
        ${_io_data}/vllm_decode_small.jsonl
        ${_io_data}/vllm_raw_small.jsonl)

# The moepolicy routing trace as JSONL and CSV (io/trace_text.hpp), both readers on each
# input.
moepolicy_add_fuzzer(fuzz_trace_text
  SOURCE ${CMAKE_CURRENT_LIST_DIR}/fuzz_trace_text.cpp
  MAX_LEN ${_jsonl_max_len}
  SEED_LINES 16
  SEEDS ${_io_data}/moepolicy_small.jsonl
        ${_io_data}/moepolicy_small.csv)

unset(_jsonl_max_len)
unset(_io_data)
unset(_granite_traces)
unset(_mixtral_traces)
