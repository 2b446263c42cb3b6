# Fuzzers of the FLAME-MoE CSV importer and of the JSON table readers.
moepolicy_add_fuzzer(fuzz_flame_csv
  SOURCE ${CMAKE_CURRENT_LIST_DIR}/fuzz_flame_csv.cpp
  SEED_LINES 12
  SEEDS
    ${MOEPOLICY_SHARED_TRACES}/flame-moe-290m/prefill_layer2.csv
    ${PROJECT_SOURCE_DIR}/tests/data/io/flame_small/prefill_layer1.csv
    ${PROJECT_SOURCE_DIR}/tests/data/io/flame_small/prefill_layer3.csv)

# MAX_LEN 4096: the hand-made tables of tests/data/io (200-300 bytes) are whole documents
# that every reader accepts, and 4 KiB holds tables of a few hundred cells; a larger table
# runs the same per-cell checks more often, and nlohmann's parser reads a mutated document
# up to its first error, so long inputs only slow each execution.
moepolicy_add_fuzzer(fuzz_tables_json
  SOURCE ${CMAKE_CURRENT_LIST_DIR}/fuzz_tables_json.cpp
  MAX_LEN 4096
  SEEDS
    ${MOEPOLICY_SHARED_TRACES}/mixtral-8x7b-mc/mixtral_c4_expert_activation.json
    ${MOEPOLICY_SHARED_TRACES}/mixtral-8x7b-mc/mixtral_quant_loss.json
    ${MOEPOLICY_SHARED_TRACES}/olmoe-counts/expert_counts.json
    ${PROJECT_SOURCE_DIR}/tests/data/io/tables_activation.json
    ${PROJECT_SOURCE_DIR}/tests/data/io/tables_quant_loss.json
    ${PROJECT_SOURCE_DIR}/tests/data/io/tables_expert_counts.json
    ${PROJECT_SOURCE_DIR}/tests/data/io/tables_coactivation.json)
