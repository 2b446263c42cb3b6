// The translation unit that builds a precompiled header of the tests or of the examples
// (MOEPOLICY_PCH: tests/CMakeLists.txt, examples/CMakeLists.txt).
