# Tests of the machine description reader (moepolicy/io/machine_json.hpp) and of the
# example machine files in examples/machines/.
moepolicy_add_test(test_io_machine_json SOURCES ${CMAKE_CURRENT_LIST_DIR}/machine_json.cpp IO)
target_compile_definitions(test_io_machine_json PRIVATE
  MOEPOLICY_EXAMPLE_MACHINES="${PROJECT_SOURCE_DIR}/examples/machines")
