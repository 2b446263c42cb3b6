# Fuzzer of the machine description reader (moepolicy/io/machine_json.hpp).
moepolicy_add_fuzzer(fuzz_machine_json
  SOURCE ${CMAKE_CURRENT_LIST_DIR}/machine_json.cpp
  SEEDS
    ${PROJECT_SOURCE_DIR}/examples/machines/papers.json
    ${PROJECT_SOURCE_DIR}/examples/machines/example-workstation.json)
