# moepolicy_add_header_check(<target>): compiles every public header alone in its own
# translation unit, proving each is self-contained (after range-v3's TestHeaders.cmake).
function(moepolicy_add_header_check target)
  file(GLOB_RECURSE _headers CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}/include
    ${PROJECT_SOURCE_DIR}/include/moepolicy/*.hpp)
  set(_sources "")
  foreach(_h ${_headers})
    string(MAKE_C_IDENTIFIER "${_h}" _id)
    set(_src ${CMAKE_CURRENT_BINARY_DIR}/header_check/${_id}.cpp)
    set(_content "#include <${_h}>\n#include <${_h}>  // twice: include guards hold\n")
    if(EXISTS ${_src})
      file(READ ${_src} _old)
    else()
      set(_old "")
    endif()
    if(NOT _old STREQUAL _content)
      file(WRITE ${_src} "${_content}")
    endif()
    list(APPEND _sources ${_src})
  endforeach()
  add_library(${target} OBJECT ${_sources})
  target_link_libraries(${target} PRIVATE moepolicy::io moepolicy_dev_settings)
  # Built as part of `all`, so a header that does not stand alone breaks the build.
endfunction()
