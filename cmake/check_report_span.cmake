# `moepolicy report --span` adds to each stage's line on stderr its CPU time and its span
# (detail/span_meter.hpp), and a line with the run's, and changes nothing in the report; so
# does running the four stages 4 to 7 at the same time, and then stages 9 and 10 (the
# default from --jobs 4 on, or `--stages-at-once`), each line with its own CPU time and span,
# and a line for each group whose span is the longest of theirs. On 3 threads, or with
# `--stages-in-turn`, they run one after another.
#   cmake -DTOOL=<moepolicy> -DWORKDIR=<the source tree> -DTRACE=<the bundled Granite trace, from WORKDIR>
#         -DGOLDEN=<tests/golden/report_granite.md> -DDIR=<scratch folder> -P check_report_span.cmake
# Each stage's span is at most its CPU time (the span is a sum of CPU time spent in the stage
# by one chain of tasks), and the run's figures are the sums of the stages' (each printed to
# 0.01 s, so the sums may differ from them by the rounding of ten figures).
cmake_minimum_required(VERSION 3.22)
file(REMOVE_RECURSE ${DIR})

# "12.34" as hundredths (the figures are printed with two decimals).
function(hundredths text var)
  if(NOT text MATCHES "^[0-9]+\\.[0-9][0-9]$")
    message(FATAL_ERROR "not a figure with two decimals: '${text}'")
  endif()
  string(REPLACE "." "" h "${text}")
  math(EXPR h "${h}")
  set(${var} ${h} PARENT_SCOPE)
endfunction()

# Runs `report --trace TRACE <args> --out DIR/<name>` and sets `var` to what it printed on
# stderr; a failed run fails the test.
function(run_report var name)
  execute_process(COMMAND ${TOOL} report --trace ${TRACE} ${ARGN} --out ${DIR}/${name}
    WORKING_DIRECTORY ${WORKDIR} OUTPUT_VARIABLE o ERROR_VARIABLE e RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " args)
    message(FATAL_ERROR "report ${args} failed (${rc}):\n${o}${e}")
  endif()
  set(${var} "${e}" PARENT_SCOPE)
endfunction()

# The CPU time and span (hundredths) at the end of `line`, a stage's line or a group's (';'
# read as '|'); a stage longer than 2 s also prints its rows per second (as under the
# sanitizers). The span may not exceed the CPU time.
function(cpu_and_span line cpu_var span_var)
  if(NOT line MATCHES " [0-9.]+ s(, [0-9]+ rows/s)?\\| CPU ([0-9.]+) s, span ([0-9.]+) s$")
    message(FATAL_ERROR "a line without its CPU time and span: '${line}'")
  endif()
  hundredths(${CMAKE_MATCH_2} cpu)
  hundredths(${CMAKE_MATCH_3} span)
  if(span GREATER cpu)
    message(FATAL_ERROR "a span above its CPU time: '${line}'")
  endif()
  set(${cpu_var} ${cpu} PARENT_SCOPE)
  set(${span_var} ${span} PARENT_SCOPE)
endfunction()

run_report(e span --jobs 3 --span --progress-every 0)
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${DIR}/span/index.md ${GOLDEN} RESULT_VARIABLE differ)
if(NOT differ EQUAL 0)
  message(FATAL_ERROR "report --span wrote another index.md than ${GOLDEN}")
endif()

# The lines hold ';', a CMake list's separator: it is read as '|'.
string(REPLACE ";" "|" e "${e}")
if(e MATCHES "stages at once")
  message(FATAL_ERROR "stages run at once on 3 threads by default:\n${e}")
endif()
string(REGEX MATCHALL "report: \\[[0-9]+/10\\] [^\n]*" stages "${e}")
list(LENGTH stages n)
if(NOT n EQUAL 10)
  message(FATAL_ERROR "${n} stage lines, expected 10:\n${e}")
endif()
set(cpu_sum 0)
set(span_sum 0)
foreach(line IN LISTS stages)
  cpu_and_span("${line}" cpu span)
  math(EXPR cpu_sum "${cpu_sum} + ${cpu}")
  math(EXPR span_sum "${span_sum} + ${span}")
endforeach()
if(NOT e MATCHES "report: stages' CPU ([0-9.]+) s, span ([0-9.]+) s: on P cores no less than max\\(CPU / P, span\\)\n")
  message(FATAL_ERROR "no line with the run's CPU time and span:\n${e}")
endif()
hundredths(${CMAKE_MATCH_1} cpu)
hundredths(${CMAKE_MATCH_2} span)
foreach(pair "cpu;cpu_sum" "span;span_sum")
  list(GET pair 0 total)
  list(GET pair 1 sum)
  math(EXPR d "${${total}} - ${${sum}}")
  if(d GREATER 5 OR d LESS -5)
    message(FATAL_ERROR "the run's ${total} (${${total}} hundredths) is not the sum of the stages' (${${sum}}):\n${e}")
  endif()
endforeach()

# The same with stages 4 to 7 at once: the default on 4 threads.
run_report(e at-once --jobs 4 --span --progress-every 0)
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${DIR}/at-once/index.md ${GOLDEN} RESULT_VARIABLE differ)
if(NOT differ EQUAL 0)
  message(FATAL_ERROR "report --jobs 4 (stages at once) wrote another index.md than ${GOLDEN}")
endif()
string(REPLACE ";" "|" e "${e}")
set(longest 0)
set(longest_timed 0)
set(others 0)
foreach(i RANGE 1 10)
  if(NOT e MATCHES "report: \\[${i}/10\\] ([^\n]*)\n")
    message(FATAL_ERROR "no line for stage ${i}:\n${e}")
  endif()
  cpu_and_span("${CMAKE_MATCH_1}" cpu span)
  if(i GREATER_EQUAL 4 AND i LESS_EQUAL 7)
    if(span GREATER longest)
      set(longest ${span})
    endif()
  elseif(i GREATER_EQUAL 9)
    if(span GREATER longest_timed)
      set(longest_timed ${span})
    endif()
  else()
    math(EXPR others "${others} + ${span}")
  endif()
endforeach()
# Each group's span is its longest stage's, and the few microseconds its task spends after
# that stage's meter stopped (printing its line); that of CXL-MoE and Edge-MoE also the
# trace read whole giving way to its prefill steps, before them (a few milliseconds here).
set(groups 0)
foreach(g "4-7|4|longest" "9-10|2|longest_timed")
  string(REPLACE "|" ";" g "${g}")
  list(GET g 0 which)
  list(GET g 1 count)
  list(GET g 2 var)
  if(NOT e MATCHES "report: \\[${which}/10\\] ${count} stages at once \\.\\.\\.( [^\n]+)\n")
    message(FATAL_ERROR "no line for stages ${which} run at once:\n${e}")
  endif()
  cpu_and_span("${CMAKE_MATCH_1}" group_cpu group)
  math(EXPR d "${group} - ${${var}}")
  if(d LESS 0 OR d GREATER 2)
    message(FATAL_ERROR "the span of stages ${which} (${group} hundredths) is not their longest's (${${var}}):\n${e}")
  endif()
  math(EXPR groups "${groups} + ${group}")
endforeach()
if(NOT e MATCHES "report: stages' CPU [0-9.]+ s, span ([0-9.]+) s: on P cores")
  message(FATAL_ERROR "no line with the run's CPU time and span:\n${e}")
endif()
hundredths(${CMAKE_MATCH_1} run)
math(EXPR d "${run} - ${others} - ${groups}")
if(d GREATER 5 OR d LESS -5)
  message(FATAL_ERROR "the run's span (${run} hundredths) is not the groups' and the other stages':\n${e}")
endif()

# Without --span the lines are as before; --stages-in-turn runs them one after another on 4
# threads.
run_report(e plain --skip-timed --progress-every 0 --jobs 4 --stages-in-turn)
if(e MATCHES " s, span [0-9]|stages. CPU")
  message(FATAL_ERROR "a span printed without --span:\n${e}")
endif()
if(e MATCHES "stages at once" OR NOT e MATCHES "report: \\[4/10\\] [^\n]* \\.\\.\\. "
   OR NOT e MATCHES "report: \\[9/10\\] [^\n]* \\.\\.\\. ")
  message(FATAL_ERROR "--stages-in-turn did not run stages 4 to 7 and 9 to 10 one after another:\n${e}")
endif()

# --stages-at-once runs them at once below 4 threads too.
run_report(e asked --skip-timed --progress-every 0 --jobs 2 --stages-at-once)
if(NOT e MATCHES "report: \\[4-7/10\\] 4 stages at once" OR NOT e MATCHES "report: \\[9-10/10\\] 2 stages at once")
  message(FATAL_ERROR "--stages-at-once did not run stages 4 to 7 and 9 to 10 at once on 2 threads:\n${e}")
endif()

# The two options exclude each other.
execute_process(COMMAND ${TOOL} report --trace ${TRACE} --stages-at-once --stages-in-turn --out ${DIR}/both
  WORKING_DIRECTORY ${WORKDIR} OUTPUT_VARIABLE o ERROR_VARIABLE e RESULT_VARIABLE rc)
if(rc EQUAL 0 OR NOT "${o}${e}" MATCHES "excludes")
  message(FATAL_ERROR "report --stages-at-once --stages-in-turn did not fail as excluded (${rc}):\n${o}${e}")
endif()
