# Runs a driver and compares what it prints (or, with OUTPUT_FILE, the file it writes) with
# a golden file, or rewrites the golden file when PRINT_GOLDEN is true
# (-DMOEPOLICY_PRINT_GOLDEN=ON at configure).
#   cmake -DCOMMAND=<exe;args> -DGOLDEN=<file> -DWORKDIR=<dir> [-DOUTPUT_FILE=<file>]
#         [-DPRINT_GOLDEN=ON] -P golden.cmake
execute_process(COMMAND ${COMMAND} WORKING_DIRECTORY ${WORKDIR}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${COMMAND} failed (${rc}):\n${err}")
endif()
if(OUTPUT_FILE)
  if(NOT EXISTS ${OUTPUT_FILE})
    message(FATAL_ERROR "${COMMAND} did not write ${OUTPUT_FILE}")
  endif()
  file(READ ${OUTPUT_FILE} out)
endif()
if(PRINT_GOLDEN)
  file(WRITE ${GOLDEN} "${out}")
  message(STATUS "golden: wrote ${GOLDEN}")
  return()
endif()
if(NOT EXISTS ${GOLDEN})
  message(FATAL_ERROR "golden file ${GOLDEN} is missing; configure with -DMOEPOLICY_PRINT_GOLDEN=ON to make it")
endif()
file(READ ${GOLDEN} expected)
if(NOT out STREQUAL expected)
  string(REPLACE ";" " " cmd "${COMMAND}")
  file(WRITE ${GOLDEN}.actual "${out}")
  message(FATAL_ERROR "output differs from ${GOLDEN}\n(actual output written to ${GOLDEN}.actual; "
                      "diff them, and regenerate on purpose with -DMOEPOLICY_PRINT_GOLDEN=ON)\n--- actual ---\n${out}")
endif()
message(STATUS "golden: ${GOLDEN} matches")
