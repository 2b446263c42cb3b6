# Replaying traces through expert caches (sim/cache_replay.hpp): the API on synthetic and
# bundled traces, and measured figures on the shared real traces.
moepolicy_add_test(test_sim_cache_replay SOURCES ${CMAKE_CURRENT_LIST_DIR}/cache_replay.cpp)
# count_allocations.hpp replaces operator new with malloc; GCC flags the free it inlines.
target_compile_options(test_sim_cache_replay PRIVATE $<$<CXX_COMPILER_ID:GNU>:-Wno-mismatched-new-delete>)
moepolicy_optimise_when_sanitized(test_sim_cache_replay)
moepolicy_add_test(test_sim_cache_replay_real_traces SOURCES ${CMAKE_CURRENT_LIST_DIR}/real_traces.cpp IO)
