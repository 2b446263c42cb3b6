# The report's SVG plots (examples/report/svg.hpp) and the XML well-formedness checker of
# the tests (tests/support/xml_check.hpp), with check_svg, a command-line checker of SVG files.
moepolicy_add_test(test_report_xml_check SOURCES ${CMAKE_CURRENT_LIST_DIR}/xml_check.cpp)

moepolicy_add_test(test_report_svg SOURCES ${CMAKE_CURRENT_LIST_DIR}/svg.cpp)
target_include_directories(test_report_svg PRIVATE ${PROJECT_SOURCE_DIR}/examples)
target_compile_definitions(test_report_svg PRIVATE MOEPOLICY_REPORT_TEST_DATA="${CMAKE_CURRENT_LIST_DIR}/data")

# check_svg <dir-or-files...>: used by the report's tests on what `moepolicy report` writes.
add_executable(moepolicy_check_svg ${CMAKE_CURRENT_LIST_DIR}/check_svg.cpp)
target_include_directories(moepolicy_check_svg PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../support)
target_link_libraries(moepolicy_check_svg PRIVATE moepolicy_dev_settings)
target_compile_features(moepolicy_check_svg PRIVATE cxx_std_20)

# One sample of each chart kind, written fresh, then checked by check_svg.
add_executable(moepolicy_svg_samples ${CMAKE_CURRENT_LIST_DIR}/svg_samples.cpp)
target_include_directories(moepolicy_svg_samples PRIVATE ${PROJECT_SOURCE_DIR}/examples ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(moepolicy_svg_samples PRIVATE moepolicy_dev_settings)
target_compile_features(moepolicy_svg_samples PRIVATE cxx_std_20)
set(_report_samples ${CMAKE_CURRENT_BINARY_DIR}/report-svg-samples)
add_test(NAME report_svg_samples_clean COMMAND ${CMAKE_COMMAND} -E rm -rf ${_report_samples})
set_tests_properties(report_svg_samples_clean PROPERTIES FIXTURES_SETUP report_svg_samples_clean)
add_test(NAME report_svg_samples_write COMMAND moepolicy_svg_samples ${_report_samples})
set_tests_properties(report_svg_samples_write PROPERTIES
  FIXTURES_SETUP report_svg_samples FIXTURES_REQUIRED report_svg_samples_clean)
add_test(NAME report_check_svg_samples COMMAND moepolicy_check_svg ${_report_samples})
set_tests_properties(report_check_svg_samples PROPERTIES
  FIXTURES_REQUIRED report_svg_samples PASS_REGULAR_EXPRESSION "check_svg: 8 passed, 0 failed")

# check_svg itself on hand-made files: a good one passes, each bad one fails, and a folder
# with no SVG in it fails.
set(_report_data ${CMAKE_CURRENT_LIST_DIR}/data)
add_test(NAME report_check_svg_good COMMAND moepolicy_check_svg ${_report_data}/good)
set_tests_properties(report_check_svg_good PROPERTIES PASS_REGULAR_EXPRESSION "check_svg: 1 passed, 0 failed")
foreach(_bad not_well_formed not_svg_root too_few_elements empty)
  add_test(NAME report_check_svg_rejects_${_bad} COMMAND moepolicy_check_svg ${_report_data}/bad/${_bad}.svg)
  set_tests_properties(report_check_svg_rejects_${_bad} PROPERTIES WILL_FAIL TRUE)
endforeach()
add_test(NAME report_check_svg_bad_folder COMMAND moepolicy_check_svg ${_report_data}/bad)
set_tests_properties(report_check_svg_bad_folder PROPERTIES PASS_REGULAR_EXPRESSION "check_svg: 0 passed, 4 failed")
add_test(NAME report_check_svg_rejects_no_svg COMMAND moepolicy_check_svg ${_report_data}/no-svg)
set_tests_properties(report_check_svg_rejects_no_svg PROPERTIES WILL_FAIL TRUE)

# The DynaExq plots' series merged into at most a fixed number of points
# (examples/common/interval_points.hpp).
moepolicy_add_test(test_report_interval_points SOURCES ${CMAKE_CURRENT_LIST_DIR}/interval_points.cpp)
target_include_directories(test_report_interval_points PRIVATE ${PROJECT_SOURCE_DIR}/examples)
