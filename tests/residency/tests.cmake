# DynaExq's residency mechanism (DynaExq §3.2–3.4). Every test name starts with
# "test_residency_": the ThreadSanitizer CI configuration builds those targets and runs
# `ctest -R '^test_residency_'`.
moepolicy_add_test(test_residency_precision_tier SOURCES ${CMAKE_CURRENT_LIST_DIR}/precision_tier.cpp)
moepolicy_add_test(test_residency_concepts SOURCES ${CMAKE_CURRENT_LIST_DIR}/concepts.cpp)
moepolicy_add_test(test_residency_budget_tracker SOURCES ${CMAKE_CURRENT_LIST_DIR}/budget_tracker.cpp)
moepolicy_add_test(test_residency_block_pool SOURCES ${CMAKE_CURRENT_LIST_DIR}/block_pool.cpp)
moepolicy_add_test(test_residency_versioned_expert SOURCES ${CMAKE_CURRENT_LIST_DIR}/versioned_expert.cpp)
moepolicy_add_test(test_residency_transition_queue SOURCES ${CMAKE_CURRENT_LIST_DIR}/transition_queue.cpp)
# Readers resolve handles and verify checksums while the worker promotes and demotes under
# random targets and a tight budget; bounded to about a second under ThreadSanitizer.
moepolicy_add_test(test_residency_stress SOURCES ${CMAKE_CURRENT_LIST_DIR}/stress.cpp)
# Readers pin windows and resolve every handle several times in each while publications land:
# one version per handle per window, visible from the next window; bounded to a few hundred ms.
moepolicy_add_test(test_residency_pinning SOURCES ${CMAKE_CURRENT_LIST_DIR}/pinning.cpp)
# Planned pools fit the expert region over every model preset and a sweep of budgets, and the
# mechanism built from plans never misses a block or exceeds a bound under concurrent readers.
moepolicy_add_test(test_residency_plan_fit SOURCES ${CMAKE_CURRENT_LIST_DIR}/plan_fit.cpp)
