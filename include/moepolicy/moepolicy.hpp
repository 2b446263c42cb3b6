// moepolicy/moepolicy.hpp — every public header of the core library, for examples and
// quick experiments. Library code and tests include exactly what they use instead.
// The trace importers (moepolicy/io/) need the moepolicy::io target and are not included.
#pragma once

#include "moepolicy/version.hpp"

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/input_limits.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/core/units.hpp"

#include "moepolicy/cost/any_device.hpp"
#include "moepolicy/cost/concepts.hpp"
#include "moepolicy/cost/device_spec.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/profiled.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/cost/trimoe_profiles.hpp"

#include "moepolicy/balance/migration_planner.hpp"
#include "moepolicy/balance/ndp_rebalance.hpp"
#include "moepolicy/balance/two_pointer.hpp"

#include "moepolicy/cache/any_eviction_policy.hpp"
#include "moepolicy/cache/belady.hpp"
#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/cache/ema_score.hpp"
#include "moepolicy/cache/expert_cache.hpp"
#include "moepolicy/cache/fifo.hpp"
#include "moepolicy/cache/gated_prefetch.hpp"
#include "moepolicy/cache/hawkeye.hpp"
#include "moepolicy/cache/lfu.hpp"
#include "moepolicy/cache/lru.hpp"
#include "moepolicy/cache/predicted_reuse.hpp"
#include "moepolicy/cache/score_aware.hpp"
#include "moepolicy/cache/space_time_bound.hpp"
#include "moepolicy/cache/stack_distance.hpp"
#include "moepolicy/cache/sticky_lru.hpp"

#include "moepolicy/ep/deepseek_eplb.hpp"
#include "moepolicy/ep/exact.hpp"
#include "moepolicy/ep/formats.hpp"
#include "moepolicy/ep/lower_bound.hpp"
#include "moepolicy/ep/problem.hpp"
#include "moepolicy/ep/rebalancer.hpp"

#include "moepolicy/place/prefill_placement.hpp"

#include "moepolicy/predict/ema_load_predictor.hpp"
#include "moepolicy/predict/hotness.hpp"
#include "moepolicy/predict/markov_predictor.hpp"
#include "moepolicy/predict/oracle_predictor.hpp"
#include "moepolicy/predict/precision_budget.hpp"
#include "moepolicy/predict/precision_target.hpp"
#include "moepolicy/predict/prefetch_queue.hpp"
#include "moepolicy/predict/short_horizon_predictor.hpp"
#include "moepolicy/predict/transition_predictor.hpp"

#include "moepolicy/quant/bit_allocation.hpp"
#include "moepolicy/quant/exact_allocation.hpp"
#include "moepolicy/quant/prefix_split.hpp"

#include "moepolicy/residency/block_pool.hpp"
#include "moepolicy/residency/budget_tracker.hpp"
#include "moepolicy/residency/concepts.hpp"
#include "moepolicy/residency/precision_tier.hpp"
#include "moepolicy/residency/transition_queue.hpp"
#include "moepolicy/residency/versioned_expert.hpp"

#include "moepolicy/route/expert_cache_router.hpp"

#include "moepolicy/sched/batched_steps.hpp"
#include "moepolicy/sched/bottleneck_refinement.hpp"
#include "moepolicy/sched/concepts.hpp"
#include "moepolicy/sched/exact.hpp"
#include "moepolicy/sched/gpu_cpu_ndp.hpp"
#include "moepolicy/sched/local_search.hpp"
#include "moepolicy/sched/lower_bound.hpp"
#include "moepolicy/sched/problem.hpp"

#include "moepolicy/score/importance.hpp"

#include "moepolicy/sim/cache_replay.hpp"
#include "moepolicy/sim/decode_streams.hpp"
#include "moepolicy/sim/edge_replay.hpp"
#include "moepolicy/sim/forward_pass.hpp"
#include "moepolicy/sim/gpu_ndp.hpp"
#include "moepolicy/sim/gpu_ndp_replay.hpp"
#include "moepolicy/sim/offload_replay.hpp"
#include "moepolicy/sim/timed_cache.hpp"
#include "moepolicy/sim/timed_residency.hpp"
#include "moepolicy/sim/timeline.hpp"
#include "moepolicy/sim/trimoe_replay.hpp"

#include "moepolicy/stats/analysis.hpp"
#include "moepolicy/stats/routing_stats.hpp"

#include "moepolicy/trace/canonical.hpp"
#include "moepolicy/trace/csv_export.hpp"
#include "moepolicy/trace/routing_trace.hpp"
#include "moepolicy/trace/summary.hpp"
#include "moepolicy/trace/tables.hpp"
