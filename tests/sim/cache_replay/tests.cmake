# Replaying traces through expert caches (sim/cache_replay.hpp): the API on synthetic and
# bundled traces, and measured figures on the shared real traces.
moepolicy_add_test(test_sim_cache_replay SOURCES ${CMAKE_CURRENT_LIST_DIR}/cache_replay.cpp)
moepolicy_add_test(test_sim_cache_replay_real_traces SOURCES ${CMAKE_CURRENT_LIST_DIR}/real_traces.cpp IO)
