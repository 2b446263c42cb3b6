# `moepolicy report --requests-shown N` draws the activation heatmaps and the prefill <->
# decode similarity's lines and rows of the first N requests only, says how many it left
# out, and adds a similarity row over every request; a negative N is refused.
#   cmake -DTOOL=<moepolicy> -DTRACE=<the bundled Granite trace> -DDIR=<scratch folder>
#         -P check_report_requests_shown.cmake
# On the Granite trace: 12 requests, each with a prefill and decode steps; over all of them
# the similarity's mean of the means is 0.834, its lowest layer 0.603 and its highest 0.974
# (the rows of tests/golden/report_granite.md).
cmake_minimum_required(VERSION 3.22)
file(REMOVE_RECURSE ${DIR})

# The text is passed by name: a value holding ';' would be split into several arguments.
function(expect_count what pattern var want)
  string(REGEX MATCHALL "${pattern}" found "${${var}}")
  list(LENGTH found n)
  if(NOT n EQUAL want)
    message(FATAL_ERROR "${what}: ${n}, expected ${want}")
  endif()
endfunction()

function(expect_text var want)
  string(FIND "${${var}}" "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "index.md lacks \"${want}\":\n${${var}}")
  endif()
endfunction()

foreach(shown 3 0)
  set(out ${DIR}/shown-${shown})
  execute_process(COMMAND ${TOOL} report --trace ${TRACE} --skip-timed --requests-shown ${shown} --progress-every 0
    --out ${out} OUTPUT_VARIABLE o ERROR_VARIABLE e RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "report --requests-shown ${shown} failed (${rc}):\n${o}${e}")
  endif()
  file(READ ${out}/index.md md)
  file(GLOB svgs ${out}/*/activations-*.svg)
  list(LENGTH svgs n)
  if(NOT n EQUAL shown)
    message(FATAL_ERROR "--requests-shown ${shown}: ${n} heatmap files")
  endif()
  # (Matches that hold no '[': CMake's lists do not split inside brackets.)
  expect_count("--requests-shown ${shown}: heatmaps in index.md" "/activations-[^)]*\\.svg\\)" md ${shown})
  expect_text(md "Heatmaps of the first ${shown} of the 12 requests with decode steps (`--requests-shown` sets how many).")
  # The first requests' rows in trace order, then the row over all twelve.
  expect_count("--requests-shown ${shown}: similarity rows" "\n\\| [0-9][0-9]-cal-[a-z]+-[0-9]+ \\|" md ${shown})
  expect_text(md "| all 12 requests | 0.834 | 0.603 | 0.974 |")
  expect_text(md "Lines and rows of the first ${shown} of the 12 requests with both phases")
  if(shown EQUAL 3)
    expect_text(md "| 00-cal-factual-01 | 0.781 | 0.636 | 0.933 |\n| 01-cal-coding-01 |")
    if(NOT EXISTS ${out}/granite-3.1-1b-a400m/similarity.svg)
      message(FATAL_ERROR "--requests-shown 3: no similarity.svg")
    endif()
  elseif(EXISTS ${out}/granite-3.1-1b-a400m/similarity.svg)
    message(FATAL_ERROR "--requests-shown 0 drew a similarity chart without lines")
  endif()
endforeach()

# A count below zero is refused, naming the option.
execute_process(COMMAND ${TOOL} report --trace ${TRACE} --requests-shown -1 --out ${DIR}/negative
  OUTPUT_VARIABLE o ERROR_VARIABLE e RESULT_VARIABLE rc)
if(rc EQUAL 0 OR NOT "${o}${e}" MATCHES "--requests-shown")
  message(FATAL_ERROR "--requests-shown -1 was not refused by name (${rc}):\n${o}${e}")
endif()
if(EXISTS ${DIR}/negative)
  message(FATAL_ERROR "--requests-shown -1 wrote ${DIR}/negative")
endif()
