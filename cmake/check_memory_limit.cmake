# Runs `TOOL ARGS` (ARGS a list; the word TRACE in it stands for the file TRACE) as a whole
# process under a hard limit on its data segment, `prlimit --data=LIMIT`, with
#   LIMIT = FILE_PERCENT / 100 * (the size of TRACE) + ALLOWANCE_MB MiB.
# RLIMIT_DATA (Linux >= 4.7) caps the heap: brk and every private writable mapping
# (malloc's mmaps, thread stacks), reserved or touched. It does not count the read-only
# map of TRACE, whose pages the readers give back as they go, so a streaming command's
# limit does not grow with the file. A command that needs more fails its allocation
# (std::bad_alloc) and exits non-zero; this script then fails naming the limit.
#
# -DPRLIMIT=... -DTOOL=... -DTRACE=... "-DARGS=replay|TRACE|..." -DFILE_PERCENT=N
# -DALLOWANCE_MB=N -DEXPECT=REGEX (what a complete run prints, on stdout or stderr)
# -DREJECT=REGEX: what the run must not print on either (a command that catches a failed
# allocation and goes on, as the report does with a family that cannot run, says so there).
# -DEXPECT_OVER=ON: the limit is meant to be too low; the run must fail for lack of memory.
# -DREMOVE=FILE: a file the command writes, removed after the run.
if(NOT EXISTS "${TRACE}")
  message(FATAL_ERROR "${TRACE} not found: its fixture (scale_trace_once.cmake) did not run")
endif()
file(SIZE "${TRACE}" size)
math(EXPR limit "${size} / 100 * ${FILE_PERCENT} + ${ALLOWANCE_MB} * 1048576")
math(EXPR limit_mb "${limit} / 1048576")
math(EXPR size_mb "${size} / 1048576")
string(REPLACE "|" ";" ARGS "${ARGS}")
list(TRANSFORM ARGS REPLACE "^TRACE$" "${TRACE}")
string(REPLACE ";" " " shown "${ARGS}")
message("moepolicy ${shown}\n  file ${size_mb} MiB; data limit ${limit_mb} MiB "
        "(${FILE_PERCENT}% of the file + ${ALLOWANCE_MB} MiB)")
execute_process(COMMAND "${PRLIMIT}" --data=${limit} -- "${TOOL}" ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(REMOVE)
  file(REMOVE "${REMOVE}")
endif()
if(EXPECT_OVER)
  if(rc EQUAL 0)
    message(FATAL_ERROR "ran within ${limit_mb} MiB, a limit meant to be too low: the limit is not enforced\n${out}")
  endif()
  if(NOT err MATCHES "bad_alloc|memory")
    message(FATAL_ERROR "failed (${rc}) under ${limit_mb} MiB, but not for lack of memory:\n${err}")
  endif()
  message("failed under ${limit_mb} MiB as expected: ${err}")
  return()
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "moepolicy ${shown} failed (${rc}) under a data limit of ${limit_mb} MiB "
                      "(${FILE_PERCENT}% of the ${size_mb} MiB file + ${ALLOWANCE_MB} MiB): "
                      "its memory grew past the target\n${err}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "moepolicy ${shown} did not print '${EXPECT}':\n${out}${err}")
endif()
if(REJECT AND "${out}${err}" MATCHES "${REJECT}")
  message(FATAL_ERROR "moepolicy ${shown} printed '${CMAKE_MATCH_0}' under a data limit of ${limit_mb} MiB: part of "
                      "it ran out of memory\n${out}${err}")
endif()
message("${out}")
