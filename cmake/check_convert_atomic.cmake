# `moepolicy convert -o OUT` replaces OUT only once it is written whole: with the file size
# limit too small for the output (as on a full disk) the conversion fails, OUT keeps its
# old contents and no temporary file stays beside it; without the limit OUT is replaced.
#   cmake -DTOOL=<moepolicy> -DTRACE=<trace> -DDIR=<scratch folder> -P check_convert_atomic.cmake
cmake_minimum_required(VERSION 3.22)
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
foreach(_out out.csv out.mtrace)
  file(WRITE ${DIR}/${_out} "the old file\n")
  # The limit in 512- or 1024-byte blocks (by the shell); SIGXFSZ ignored, so that an
  # oversized write fails with EFBIG instead of killing the process.
  execute_process(COMMAND sh -c "trap '' XFSZ; ulimit -f 4; exec \"$0\" convert \"$1\" -o \"$2\""
                          ${TOOL} ${TRACE} ${DIR}/${_out}
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(rc EQUAL 0)
    message(FATAL_ERROR "convert -o ${_out} succeeded under a 4-block file size limit:\n${out}${err}")
  endif()
  file(READ ${DIR}/${_out} kept)
  if(NOT kept STREQUAL "the old file\n")
    string(LENGTH "${kept}" n)
    message(FATAL_ERROR "a failed convert -o ${_out} changed the old file (now ${n} bytes):\n${err}")
  endif()
  file(GLOB left ${DIR}/.*)
  if(left)
    message(FATAL_ERROR "a failed convert -o ${_out} left ${left}")
  endif()
  message(STATUS "${_out}: the failed write left the old file; the error: ${err}")
  execute_process(COMMAND ${TOOL} convert ${TRACE} -o ${DIR}/${_out} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  file(SIZE ${DIR}/${_out} size)
  if(NOT rc EQUAL 0 OR size LESS 4096)
    message(FATAL_ERROR "convert -o ${_out} failed (${rc}) or wrote only ${size} bytes:\n${out}${err}")
  endif()
endforeach()
file(REMOVE_RECURSE ${DIR})
