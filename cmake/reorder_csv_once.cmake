# Writes OUT as the routing CSV trace CSV with its rows out of canonical order (sorted by
# layer, then position, step and request name: every run of an external sort holds rows of
# every request, and the merge interleaves all of them), unless OUT is already newer than
# CSV. The metadata and header lines stay first. Run with -DCSV=... -DOUT=... -DSORT=...
# (coreutils sort; LC_ALL=C so the order does not depend on the locale).
if(EXISTS "${OUT}" AND NOT "${CSV}" IS_NEWER_THAN "${OUT}")
  file(SIZE "${OUT}" size)
  message("reusing ${OUT} (${size} bytes)")
  return()
endif()
if(NOT EXISTS "${CSV}")
  message(FATAL_ERROR "${CSV} not found: its fixture (scale_trace_once.cmake) did not run")
endif()
execute_process(
  COMMAND sh -c "{ head -n 2 \"$0\" && tail -n +3 \"$0\" | LC_ALL=C \"$1\" -t, -k5,5n -k4,4n -k3,3n -k1,1; } > \"$2\""
          "${CSV}" "${SORT}" "${OUT}.partial"
  RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  file(REMOVE "${OUT}.partial")
  message(FATAL_ERROR "reordering ${CSV} into ${OUT} failed (${rc}): ${err}")
endif()
file(RENAME "${OUT}.partial" "${OUT}")
file(SIZE "${OUT}" size)
message("wrote ${OUT}: the rows of ${CSV} out of order, ${size} bytes")
