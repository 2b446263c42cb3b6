# Fuzzer of the loss-table CSV reader.
moepolicy_add_fuzzer(fuzz_loss_table_csv
  SOURCE ${CMAKE_CURRENT_LIST_DIR}/fuzz_loss_table_csv.cpp
  SEEDS ${PROJECT_SOURCE_DIR}/tests/data/io/loss_small.csv)
