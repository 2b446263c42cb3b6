# `moepolicy convert TRACE -o OUT` (routing JSONL or CSV), then `moepolicy replay OUT ARGS`
# and `moepolicy replay TRACE ARGS`: a text trace, replayed from the scratch canonical file
# it is written as, prints what its canonical file prints, but for the path it names.
# Run with -DTOOL=... -DTRACE=... -DOUT=... "-DARGS=a|b|...".
string(REPLACE "|" ";" _args "${ARGS}")
execute_process(COMMAND ${TOOL} convert ${TRACE} -o ${OUT} RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "convert ${TRACE} -o ${OUT} failed (${rc}): ${err}")
endif()
execute_process(COMMAND ${TOOL} replay ${OUT} ${_args} RESULT_VARIABLE rc_text OUTPUT_VARIABLE text ERROR_VARIABLE err_text)
file(REMOVE ${OUT})
execute_process(COMMAND ${TOOL} replay ${TRACE} ${_args} RESULT_VARIABLE rc_canon OUTPUT_VARIABLE canon
                ERROR_VARIABLE err_canon)
if(NOT rc_text EQUAL 0 OR NOT rc_canon EQUAL 0)
  message(FATAL_ERROR "a replay failed: ${rc_text}: ${err_text} / ${rc_canon}: ${err_canon}")
endif()
string(REPLACE "${OUT}" "TRACE" text "${text}")
string(REPLACE "${TRACE}" "TRACE" canon "${canon}")
if(NOT text STREQUAL canon OR text STREQUAL "")
  message(FATAL_ERROR "replay of ${OUT} differs from replay of ${TRACE}:\n${text}\n---\n${canon}")
endif()
message("${text}")
