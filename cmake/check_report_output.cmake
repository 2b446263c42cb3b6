# `moepolicy report --out DIR` writes a fresh folder beside DIR and puts it in DIR's place
# only once complete, with a manifest of its files; it replaces an earlier report, refuses
# (naming them) when DIR holds files no report wrote, and replaces them with --force; a
# report that fails midway (the file size limit, as a full disk) leaves DIR as it was.
#   cmake -DTOOL=<moepolicy> -DTRACE=<trace> -DDIR=<scratch folder> -P check_report_output.cmake
set(out_dir ${DIR}/report)
cmake_minimum_required(VERSION 3.22)
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})

function(run_report expect)
  execute_process(COMMAND ${ARGN} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  set(err "${err}" PARENT_SCOPE)
  if(expect STREQUAL "pass" AND NOT rc EQUAL 0)
    message(FATAL_ERROR "${ARGN} failed (${rc}):\n${out}${err}")
  elseif(expect STREQUAL "fail" AND rc EQUAL 0)
    message(FATAL_ERROR "${ARGN} succeeded, expected it to fail:\n${out}${err}")
  endif()
endfunction()

# Every file of the report folder with its hash, and nothing left beside it.
function(snapshot var)
  file(GLOB_RECURSE files RELATIVE ${out_dir} ${out_dir}/*)
  list(SORT files)
  set(s "")
  foreach(f ${files})
    file(SHA256 ${out_dir}/${f} h)
    string(APPEND s "${f} ${h}\n")
  endforeach()
  set(${var} "${s}" PARENT_SCOPE)
  file(GLOB left ${DIR}/.*)
  if(left)
    message(FATAL_ERROR "report left ${left} beside ${out_dir}")
  endif()
endfunction()

set(report ${TOOL} report --trace ${TRACE} --out ${out_dir})

# A fresh report, with its manifest listing index.md.
run_report(pass ${report})
file(STRINGS ${out_dir}/moepolicy-report.manifest listed)
if(NOT "index.md" IN_LIST listed)
  message(FATAL_ERROR "the manifest does not list index.md:\n${listed}")
endif()
snapshot(first)

# A report that fails midway leaves the earlier one whole.
# (Lines, not semicolons, in the shell script: it passes through a CMake list.)
run_report(fail sh -c "trap '' XFSZ\nulimit -f 1\nexec \"$@\"" sh ${report})
snapshot(after_failure)
if(NOT after_failure STREQUAL first)
  message(FATAL_ERROR "a failed report changed the earlier one:\nbefore:\n${first}after:\n${after_failure}\n${err}")
endif()

# A report replaces an earlier one.
run_report(pass ${report})
snapshot(second)
if(NOT second STREQUAL first)
  message(FATAL_ERROR "a second report on the same trace wrote other files:\n${first}\n${second}")
endif()

# A file no report wrote: refused, named, and left alone (as is the earlier report).
file(WRITE ${out_dir}/notes.txt "mine\n")
file(MAKE_DIRECTORY ${out_dir}/drafts)
run_report(fail ${report})
if(NOT err MATCHES "holds 2 file\\(s\\) no earlier report wrote \\(none in its moepolicy-report.manifest\\): drafts, notes.txt; .*--force")
  message(FATAL_ERROR "the refusal does not name the foreign files:\n${err}")
endif()
if(NOT EXISTS ${out_dir}/notes.txt OR NOT EXISTS ${out_dir}/index.md)
  message(FATAL_ERROR "the refused report removed files")
endif()

# --force replaces the whole folder.
run_report(pass ${report} --force)
snapshot(forced)
if(NOT forced STREQUAL first OR EXISTS ${out_dir}/notes.txt)
  message(FATAL_ERROR "--force did not replace the folder with the report:\n${forced}")
endif()
file(REMOVE_RECURSE ${DIR})
