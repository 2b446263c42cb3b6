#include "moepolicy/sim/gpu_ndp_replay.hpp"

#include <doctest/doctest.h>

#include <array>
#include <vector>

#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"

using namespace moepolicy;

namespace {

// One layer, four experts, top-1. Prefill: experts 0, 0, 1. Decode: 0, 2, 2, 3.
routing_trace toy() {
  routing_trace_builder b({.model = "toy", .source = "test", .num_layers = 1, .num_experts = 4, .top_k = 1});
  const auto r = b.add_request("r");
  const std::array<float, 1> w{1.0f};
  std::uint32_t pos = 0;
  for (expert_id e : std::array<expert_id, 3>{0, 0, 1}) {
    const std::array<expert_id, 1> ids{e};
    b.add({r, phase::prefill, 0, pos++, 0, ids, w, {}});
  }
  std::uint32_t step = 1;
  for (expert_id e : std::array<expert_id, 4>{0, 2, 2, 3}) {
    const std::array<expert_id, 1> ids{e};
    b.add({r, phase::decode, step++, pos++, 0, ids, w, {}});
  }
  return std::move(b).finish();
}

const model_shape shape{"toy", 1, 0, 4, 1, 0, 4096, 14336};

gpu_ndp_system<roofline_cost, roofline_cost> sys() {
  return {roofline_cost{presets::h100_sxm_gen4(), shape}, roofline_cost{presets::cxl_ndp(), shape}};
}

loss_table losses() {
  // Bits 1, 2, 3; expert e loses (4 - b) * (e + 1).
  std::vector<double> v;
  for (int e = 0; e < 4; ++e) {
    for (int b = 1; b <= 3; ++b) v.push_back((4.0 - b) * (e + 1));
  }
  return loss_table(1, 4, {bitwidth{1}, bitwidth{2}, bitwidth{3}}, v);
}

}  // namespace

TEST_CASE("placement systems: top-2 by prefill on the GPU, the rest in place at their bits") {
  const auto s = sys();
  const loss_table L = losses();
  const std::array<gpu_ndp_system_config, 3> systems{{
      {"ctx", gpu_ndp_system_kind::context_aware, 2.0},
      {"u3", gpu_ndp_system_kind::uniform_bits, 3.0, bitwidth{3}},
      {"gpu", gpu_ndp_system_kind::gpu_only},
  }};
  const auto res = replay_gpu_ndp(toy(), s, &L, systems, {.gpu_experts_per_layer = 2});
  REQUIRE(res.size() == 1);
  const auto& r = res[0];
  CHECK(r.prefill_tokens == 3);
  // Prefill counts (2, 1, 0, 0) vs decode (1, 0, 2, 1): cosine = 2 / (sqrt(5) sqrt(6)).
  CHECK(r.mean_similarity == doctest::Approx(2.0 / (std::sqrt(5.0) * std::sqrt(6.0))));
  const double gpu_step = s.gpu().compute_seconds({0, 0}, fp16, 1);
  const double act = s.ndp().activation_transfer_seconds(1);

  // Context-aware at 2 bits: NDP experts 2 and 3 (importance tie at 0 -> id order),
  // R = 2 increments: prefix split gives (n3, n2) = (1, 0) or (0, 2); gains
  // Δ(2): 3, 4 and Δ(3): 6, 8 -> (0, 2) = 7 vs (1, 0) = 6: both at 2 bits.
  const auto& ctx = r.outcomes[0];
  CHECK(ctx.decode_steps == 4);
  const double ndp2 = s.ndp().compute_seconds({0, 2}, bitwidth{2}, 1) + act;
  CHECK(ctx.decode_seconds == doctest::Approx(gpu_step + 3 * std::max(0.0, ndp2)));
  CHECK(ctx.ndp_seconds == doctest::Approx(3 * ndp2));
  CHECK(ctx.migrated_bytes == 2 * s.gpu().footprint_bytes({0, 0}, fp16));
  // Losses: expert 2 at 2 bits twice ((4 - 2) x 3 = 6 each), expert 3 once ((4 - 2) x 4 = 8).
  CHECK(ctx.activations == 4);
  CHECK(ctx.loss_sum == doctest::Approx(2 * 6.0 + 8.0));
  CHECK(ctx.exact_objective > 0.0);
  CHECK(ctx.prefix_objective >= ctx.exact_objective);

  const auto& u3 = r.outcomes[1];
  CHECK(u3.ndp_seconds == doctest::Approx(3 * (s.ndp().compute_seconds({0, 2}, bitwidth{3}, 1) + act)));
  CHECK(u3.loss_sum == doctest::Approx(2 * 3.0 + 4.0));

  // GPU-only with a 2-expert LRU starting from the static set, the top 2 over the whole
  // trace (counts 3, 1, 2, 1 -> {0, 2}): decode 0 (hit), 2 (hit), 2 (hit), 3 (miss): one
  // fetch.
  const auto& g = r.outcomes[2];
  CHECK(g.migrated_bytes == s.gpu().footprint_bytes({0, 0}, fp16));
  CHECK(g.ndp_seconds == 0.0);
  CHECK(g.decode_seconds == doctest::Approx(4 * gpu_step + s.gpu().transfer_seconds(s.gpu().footprint_bytes({0, 0}, fp16))));
}

TEST_CASE("bad input names replay_gpu_ndp") {
  const auto s = sys();
  const std::array<gpu_ndp_system_config, 1> ctx{{{"ctx", gpu_ndp_system_kind::context_aware, 2.0}}};
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_gpu_ndp(toy(), s, nullptr, ctx)),
                       "moepolicy::replay_gpu_ndp: system \"ctx\" selects bitwidths and needs a loss table",
                       invalid_argument);
  const loss_table L = losses();
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_gpu_ndp(toy(), s, &L, ctx, {.gpu_experts_per_layer = 5})),
                       "moepolicy::replay_gpu_ndp: gpu_experts_per_layer must be <= the experts per layer 4, got 5",
                       invalid_argument);
}
