# Writes the synthetic ROWS-row trace OUT with GENERATOR (bench/scale_trace) unless OUT is
# already there and newer than GENERATOR: the memory-limit tests share one file per build
# folder. Run with -DGENERATOR=... -DROWS=... -DOUT=...; with -DTOOL=... -DCSV=... also
# writes OUT as the routing text trace CSV (`moepolicy convert`: CSV or JSONL, by CSV's
# extension) unless CSV is newer than OUT and TOOL.
function(write_csv)
  if(NOT CSV OR (EXISTS "${CSV}" AND NOT "${OUT}" IS_NEWER_THAN "${CSV}" AND NOT "${TOOL}" IS_NEWER_THAN "${CSV}"))
    return()
  endif()
  execute_process(COMMAND "${TOOL}" convert "${OUT}" -o "${CSV}" RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${TOOL} convert ${OUT} -o ${CSV} failed (${rc}): ${err}")
  endif()
  file(SIZE "${CSV}" size)
  message("wrote ${CSV}: ${size} bytes")
endfunction()
if(EXISTS "${OUT}" AND NOT "${GENERATOR}" IS_NEWER_THAN "${OUT}")
  file(SIZE "${OUT}" size)
  message("reusing ${OUT} (${size} bytes)")
  write_csv()
  return()
endif()
# Written beside OUT and renamed over it when complete, so an interrupted run never leaves
# a partial file that a later run would reuse.
execute_process(COMMAND "${GENERATOR}" ${ROWS} "${OUT}.partial" RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  file(REMOVE "${OUT}.partial")
  message(FATAL_ERROR "${GENERATOR} ${ROWS} ${OUT}.partial failed (${rc}): ${err}")
endif()
file(RENAME "${OUT}.partial" "${OUT}")
file(SIZE "${OUT}" size)
message("wrote ${OUT}: ${ROWS} rows, ${size} bytes")
write_csv()
