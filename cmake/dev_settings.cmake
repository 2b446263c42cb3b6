# moepolicy_dev_settings: warnings and sanitizers for the project's own tests, examples,
# benchmarks and fuzzers. Never installed or exported; the library target stays clean.
add_library(moepolicy_dev_settings INTERFACE)
target_compile_options(moepolicy_dev_settings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion
  -Wnon-virtual-dtor -Wold-style-cast -Wcast-align -Woverloaded-virtual)
if(MOEPOLICY_WERROR)
  target_compile_options(moepolicy_dev_settings INTERFACE -Werror)
endif()
if(MOEPOLICY_SANITIZERS)
  target_compile_options(moepolicy_dev_settings INTERFACE
    -fsanitize=${MOEPOLICY_SANITIZERS} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(moepolicy_dev_settings INTERFACE -fsanitize=${MOEPOLICY_SANITIZERS})
endif()

# Precompiled third-party headers (the standard library, doctest, Eigen, nlohmann-json, CLI11)
# for the tests, and with clang for the examples: tests/CMakeLists.txt, examples/CMakeLists.txt.
option(MOEPOLICY_PCH "Precompile the third-party headers that the tests and examples include" ON)
