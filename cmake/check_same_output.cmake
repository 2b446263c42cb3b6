# Runs TOOL with ARGS_A and with ARGS_B (lists separated by "|") and fails unless both
# succeed with the same standard output: for options that must not change results
# (`replay --jobs`).
string(REPLACE "|" ";" _a "${ARGS_A}")
string(REPLACE "|" ";" _b "${ARGS_B}")
execute_process(COMMAND ${TOOL} ${_a} RESULT_VARIABLE _ra OUTPUT_VARIABLE _oa ERROR_VARIABLE _ea)
execute_process(COMMAND ${TOOL} ${_b} RESULT_VARIABLE _rb OUTPUT_VARIABLE _ob ERROR_VARIABLE _eb)
if(NOT _ra EQUAL 0 OR NOT _rb EQUAL 0)
  message(FATAL_ERROR "a run failed: ${_ra}: ${_ea} / ${_rb}: ${_eb}")
endif()
if(NOT _oa STREQUAL _ob)
  message(FATAL_ERROR "outputs differ:\n${_oa}\n---\n${_ob}")
endif()
if(_oa STREQUAL "")
  message(FATAL_ERROR "no output")
endif()
