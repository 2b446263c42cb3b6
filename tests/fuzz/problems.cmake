# Fuzzers of the problem readers of `moepolicy bitwidth`, `place` and `schedule`
# (examples/moepolicy/problems.hpp). The readers are the library moepolicy_problems of
# examples/CMakeLists.txt, built here again from the same sources with the fuzzers'
# instrumentation so that libFuzzer sees their coverage.
add_library(moepolicy_problems_fuzz STATIC
  ${PROJECT_SOURCE_DIR}/examples/moepolicy/plan.cpp
  ${PROJECT_SOURCE_DIR}/examples/moepolicy/schedule.cpp)
target_include_directories(moepolicy_problems_fuzz PUBLIC ${PROJECT_SOURCE_DIR}/examples/moepolicy)
target_link_libraries(moepolicy_problems_fuzz PUBLIC moepolicy::io)
target_compile_options(moepolicy_problems_fuzz PRIVATE -fsanitize=fuzzer-no-link,address,undefined
  -fno-sanitize-recover=all -gline-tables-only -O1)

set(_problems ${PROJECT_SOURCE_DIR}/examples/problems)
set(_tool_data ${PROJECT_SOURCE_DIR}/tests/data/tool)
foreach(_kind bitwidth place schedule)
  file(GLOB _seeds ${_problems}/${_kind}_*.json ${_tool_data}/${_kind}_*.json)
  moepolicy_add_fuzzer(fuzz_problem_${_kind}
    SOURCE ${CMAKE_CURRENT_LIST_DIR}/fuzz_problem_${_kind}.cpp
    SEEDS ${_seeds})
  target_link_libraries(fuzz_problem_${_kind} PRIVATE moepolicy_problems_fuzz)
endforeach()
unset(_problems)
unset(_tool_data)
unset(_seeds)
