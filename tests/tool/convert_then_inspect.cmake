# `moepolicy convert TRACE -o OUT` then `moepolicy inspect OUT`: what convert writes, every
# command reads (docs/trace-format.md). Run with -DTOOL=... -DTRACE=... -DOUT=...
execute_process(COMMAND ${TOOL} convert ${TRACE} -o ${OUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "convert failed: ${rc}")
endif()
execute_process(COMMAND ${TOOL} inspect ${OUT} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(REMOVE ${OUT})
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "inspect ${OUT} failed: ${err}")
endif()
message("${out}")
