# The problems of `moepolicy bitwidth`, `place` and `schedule` (examples/moepolicy/problems.hpp):
# read from JSON, checked field by field, solved. Built with the examples.
if(TARGET moepolicy_problems)
  moepolicy_add_test(test_tool_problems SOURCES ${CMAKE_CURRENT_LIST_DIR}/problems.cpp IO)
  target_link_libraries(test_tool_problems PRIVATE moepolicy_problems)
  target_compile_definitions(test_tool_problems PRIVATE MOEPOLICY_EXAMPLE_PROBLEMS="${PROJECT_SOURCE_DIR}/examples/problems")
endif()

# Header-only parts of the tool: printing names from input files, and the report's output
# folder.
moepolicy_add_test(test_tool_printable SOURCES ${CMAKE_CURRENT_LIST_DIR}/printable.cpp)
target_include_directories(test_tool_printable PRIVATE ${PROJECT_SOURCE_DIR}/examples/moepolicy)
moepolicy_add_test(test_tool_report_output SOURCES ${CMAKE_CURRENT_LIST_DIR}/report_output.cpp)
target_include_directories(test_tool_report_output PRIVATE ${PROJECT_SOURCE_DIR}/examples/moepolicy)
