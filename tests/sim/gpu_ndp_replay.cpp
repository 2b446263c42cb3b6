#include "moepolicy/sim/gpu_ndp_replay.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <vector>

#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "test_support.hpp"

using namespace moepolicy;

namespace {

model_shape toy_shape() { return test::mixtral_sized_toy(); }

// One request. Prefill: experts 0, 0, 1 (weights 0.9, 0.8, 0.3). Decode: 0, 2, 2, 3.
routing_trace toy(std::size_t requests = 1) {
  routing_trace_builder b({.model = "toy", .source = "test", .num_layers = 1, .num_experts = 4, .top_k = 1});
  for (std::size_t q = 0; q < requests; ++q) {
    const auto r = b.add_request("r" + std::to_string(q));
    std::uint32_t pos = 0;
    const std::array<std::pair<expert_id, float>, 3> prompt{{{0, 0.9f}, {0, 0.8f}, {1, 0.3f}}};
    for (const auto& [e, w] : prompt) {
      const std::array<expert_id, 1> ids{e};
      const std::array<float, 1> ws{w};
      b.add({r, phase::prefill, 0, pos++, 0, ids, ws, {}});
    }
    std::uint32_t step = 1;
    for (expert_id e : std::array<expert_id, 4>{0, 2, 2, 3}) {
      const std::array<expert_id, 1> ids{e};
      const std::array<float, 1> ws{1.0f};
      b.add({r, phase::decode, step++, pos++, 0, ids, ws, {}});
    }
  }
  return std::move(b).finish();
}

using system_t = gpu_ndp_system<roofline_cost, roofline_cost>;

system_t sys(const model_shape& m, bytes hbm = 80'000'000'000ULL) {
  device_spec g = presets::h100_sxm_gen4();
  g.capacity_bytes = hbm;
  return {roofline_cost{g, m}, roofline_cost{presets::cxl_ndp(), m}};
}

loss_table losses() {
  // Bits 1, 2, 3; expert e loses (4 - b) * (e + 1).
  std::vector<double> v;
  for (int e = 0; e < 4; ++e) {
    for (int b = 1; b <= 3; ++b) v.push_back((4.0 - b) * (e + 1));
  }
  return loss_table(1, 4, {bitwidth{1}, bitwidth{2}, bitwidth{3}}, v);
}

const gpu_ndp_system_result& by_label(const gpu_ndp_replay_result& r, std::string_view label) {
  for (const auto& s : r.systems) {
    if (s.config.label == label) return s;
  }
  FAIL("no system " << label);
  return r.systems.front();
}

}  // namespace

TEST_CASE("the placement copy is charged on the link: bytes / bandwidth + latency per expert") {
  const model_shape m = toy_shape();
  const auto s = sys(m);
  const loss_table L = losses();
  const std::array<gpu_ndp_system_config, 2> systems{{
      {"overlapped", gpu_ndp_system_kind::context_aware, 2.0},
      {"blocking", gpu_ndp_system_kind::context_aware, 2.0, bitwidth{3}, placement_copy::blocking},
  }};
  const auto res = replay_gpu_ndp(toy(), s, m, &L, nullptr, systems, {.gpu_experts_per_layer = 2});
  REQUIRE(res.requests.size() == 1);
  CHECK(res.requests[0].prefill_tokens == 3);
  // Prefill counts (2, 1, 0, 0) vs decode (1, 0, 2, 1): cosine = 2 / (sqrt(5) sqrt(6)).
  CHECK(res.requests[0].mean_similarity == doctest::Approx(2.0 / (std::sqrt(5.0) * std::sqrt(6.0))));
  const bytes w = s.gpu().footprint_bytes({0, 0}, fp16);
  const seconds per_expert = static_cast<double>(w) / 32e9 + 1e-6;  // PCIe Gen4 x16: 32 GB/s, 1 us
  for (const auto& sys_result : res.systems) {
    INFO(sys_result.config.label);
    REQUIRE(sys_result.ok());
    REQUIRE(sys_result.requests.size() == 1);
    const auto& o = sys_result.requests[0];
    // Top-2 by prefill importance (experts 0 and 1) are copied: no calibration, so the GPU
    // starts empty.
    CHECK(sys_result.startup_bytes == 0);
    CHECK(o.copy_bytes == 2 * w);
    const resource_id link = sys_result.accounts.find("link to GPU");
    const resource_id ndp = sys_result.accounts.find("ndp");
    CHECK(sys_result.accounts[link].moved(cost_kind::placement) == 2 * w);
    CHECK(sys_result.accounts[link].busy(cost_kind::placement) == doctest::Approx(2 * per_expert));
    // The NDP memory serves the copy's reads at its internal 512 GB/s.
    CHECK(sys_result.accounts[ndp].busy(cost_kind::placement) == doctest::Approx(2 * static_cast<double>(w) / 512e9));
    // Nothing moved over a link that no ledger line accounts for.
    CHECK(sys_result.accounts.link_bytes(cost_kind::demand_fetch) == 0);
    CHECK(o.copy_landed_after >= 2 * per_expert - 1e-12);
  }
  const auto& over = by_label(res, "overlapped").requests[0];
  const auto& block = by_label(res, "blocking").requests[0];
  // Blocking: decoding starts when the 704 MB have landed (22 ms); overlapped: at once, with
  // expert 0 running on the NDP device at FP16 until its copy lands, and the first steps
  // finish while the copy is in flight.
  CHECK(block.decode_seconds > 2 * per_expert);
  CHECK(block.steps_during_copy == 0);
  CHECK(over.steps_during_copy >= 1);
  CHECK(over.decode_seconds < block.decode_seconds);
  CHECK(over.prefill_seconds == doctest::Approx(block.prefill_seconds));
}

TEST_CASE("context-aware bitwidths and losses follow prefix split on the NDP experts") {
  const model_shape m = toy_shape();
  const auto s = sys(m);
  const loss_table L = losses();
  const std::array<gpu_ndp_system_config, 1> systems{{{"ctx", gpu_ndp_system_kind::context_aware, 2.0}}};
  const auto res = replay_gpu_ndp(toy(), s, m, &L, nullptr, systems, {.gpu_experts_per_layer = 2});
  const auto& o = res.systems[0].requests[0];
  CHECK(o.decode_steps == 4);
  // NDP experts 2 and 3 at 2 bits (prefix split with R = 2 increments: Δ(2) = 3, 4 beats
  // Δ(3) = 6 alone). Losses: expert 2 twice at (4 - 2) x 3 = 6, expert 3 once at 8. Expert 0
  // joins the GPU set; its 704 MB copy outlasts the four decode steps, so it keeps running on
  // the NDP device at the 2 bits it had before the placement (without calibration every
  // expert starts there, ranked alike: all four at 2 bits): (4 - 2) x 1 = 2.
  CHECK(o.activations == 4);
  CHECK(o.loss_sum == doctest::Approx(2 * 6.0 + 8.0 + 2.0));
  CHECK(res.systems[0].mean_loss() == doctest::Approx(22.0 / 4));
  CHECK(o.exact_objective > 0.0);
  CHECK(o.prefix_objective >= o.exact_objective);
}

TEST_CASE("a decode step on the timeline: attention, router, NDP experts with activations out and back") {
  // Uniform 3 bits, K = 0: every expert on the NDP device, nothing copied.
  const model_shape m = toy_shape();
  const auto s = sys(m);
  const std::array<gpu_ndp_system_config, 1> systems{{{"u3", gpu_ndp_system_kind::uniform_bits, 3.0, bitwidth{3}}}};
  const auto res = replay_gpu_ndp(toy(), s, m, nullptr, nullptr, systems, {.gpu_experts_per_layer = 0});
  const auto& o = res.systems[0].requests[0];
  const forward_pass_cost<roofline_cost> pass{s.gpu(), m};
  const auto& ndp = s.ndp();
  // Prefill: 3 tokens; experts 0 (2 tokens) and 1 (1 token) on the NDP device at the 3 bits
  // of the placement in effect.
  const auto prefill_at = [&](bitwidth b) {
    return pass.attention_seconds(3, 6) + pass.router_seconds(3) + 0.5 * ndp.activation_transfer_seconds(3) +
           ndp.compute_seconds({0, 0}, b, 2) + ndp.compute_seconds({0, 1}, b, 1) +
           0.5 * ndp.activation_transfer_seconds(3) + pass.output_head_seconds(1);
  };
  CHECK(o.prefill_seconds == doctest::Approx(prefill_at(bitwidth{3})));
  // Configured to prefill at FP16, the same pass takes FP16 NDP time.
  const auto fp16_prefill =
      replay_gpu_ndp(toy(), s, m, nullptr, nullptr, systems, {.gpu_experts_per_layer = 0, .prefill_at_fp16 = true});
  CHECK(fp16_prefill.systems[0].requests[0].prefill_seconds == doctest::Approx(prefill_at(fp16)));
  // Decode step s: one token reading 3 + s + 1 cached entries; one expert at 3 bits.
  seconds decode = 0.0;
  for (std::uint64_t step = 0; step < 4; ++step) {
    decode += pass.attention_seconds(1, 3 + step + 1) + pass.router_seconds(1) + ndp.activation_transfer_seconds(1) +
              ndp.compute_seconds({0, 0}, bitwidth{3}, 1) + pass.output_head_seconds(1);
  }
  CHECK(o.decode_seconds == doctest::Approx(decode));
  const auto& acc = res.systems[0].accounts;
  CHECK(acc[acc.find("gpu")].busy(cost_kind::attention) ==
        doctest::Approx(pass.attention_seconds(3, 6) + pass.attention_seconds(1, 4) + pass.attention_seconds(1, 5) +
                        pass.attention_seconds(1, 6) + pass.attention_seconds(1, 7)));
  // Activations: 3 tokens out and back in prefill, 1 per decode step: 4096 x 2 bytes each.
  CHECK(acc.link_bytes(cost_kind::activation) == 2 * (3 + 4) * 4096ULL * 2);
  CHECK(acc.link_bytes(cost_kind::placement) == 0);
}

TEST_CASE("MoNDE migrates an expert when its load makes that cheaper, never for one decode token") {
  const model_shape m = toy_shape();
  const auto s = sys(m);
  const std::array<gpu_ndp_system_config, 1> systems{{{"monde", gpu_ndp_system_kind::monde}}};
  const gpu_ndp_replay_config cfg{.gpu_experts_per_layer = 2, .prompt_tokens = 1500};
  const auto res = replay_gpu_ndp(toy(), s, m, nullptr, nullptr, systems, cfg);
  const auto& o = res.systems[0].requests[0];
  // A 1500-token prompt loops the recorded 0, 0, 1: expert 0 gets 1000 tokens, expert 1
  // 500; both are worth fetching at 2 TFLOP/s on the NDP device.
  CHECK(s.fetch_is_cheaper({0, 0}, fp16, 500));
  CHECK_FALSE(s.fetch_is_cheaper({0, 0}, fp16, 1));
  const bytes w = s.gpu().footprint_bytes({0, 0}, fp16);
  CHECK(o.fetched_bytes == 2 * w);
  const auto& acc = res.systems[0].accounts;
  CHECK(acc.link_bytes(cost_kind::demand_fetch) == 2 * w);
  CHECK(acc.link_bytes(cost_kind::placement) == 0);
}

TEST_CASE("HOBBIT-like loads a missed expert at FP16 or at low bits by its gate weight") {
  const model_shape m = toy_shape();
  const auto s = sys(m);
  const std::array<gpu_ndp_system_config, 1> systems{{{"hobbit", gpu_ndp_system_kind::hobbit_like}}};
  const auto res =
      replay_gpu_ndp(toy(), s, m, nullptr, nullptr, systems,
                     {.gpu_experts_per_layer = 4, .hobbit_fp16_weight = 0.5, .hobbit_low_bits = bitwidth{4}});
  const auto& o = res.systems[0].requests[0];
  // Prefill: expert 0 (weight 0.9) at FP16, expert 1 (0.3) at 4 bits; decode: experts 2 and
  // 3 (weight 1) at FP16; expert 0 and the second use of 2 hit.
  const bytes expected = s.gpu().footprint_bytes({0, 0}, fp16) * 3 + s.gpu().footprint_bytes({0, 1}, bitwidth{4});
  CHECK(o.fetched_bytes == expected);
  CHECK(res.systems[0].accounts.link_bytes(cost_kind::demand_fetch) == expected);
  CHECK(res.systems[0].accounts[res.systems[0].accounts.find("ndp")].busy(cost_kind::expert) == 0.0);
}

TEST_CASE("statuses: HBM too small, an infeasible budget, no loss table, no calibration") {
  const model_shape m = toy_shape();
  // Bits 1 and 3 only: two NDP experts cannot average 1.5 bits exactly (one increment of 2).
  std::vector<double> v;
  for (int e = 0; e < 4; ++e) {
    v.push_back(3.0 * (e + 1));
    v.push_back(1.0 * (e + 1));
  }
  const loss_table gaps(1, 4, {bitwidth{1}, bitwidth{3}}, v);
  const std::array<gpu_ndp_system_config, 3> systems{{
      {"ctx 1.5 bits", gpu_ndp_system_kind::context_aware, 1.5},
      {"static", gpu_ndp_system_kind::static_placement, 2.0},
      {"monde", gpu_ndp_system_kind::monde},
  }};
  const auto ok = replay_gpu_ndp(toy(), sys(m), m, &gaps, nullptr, systems, {.gpu_experts_per_layer = 2});
  CHECK(ok.systems[0].status == gpu_ndp_status::infeasible_budget);
  CHECK(ok.systems[0].status_detail == "prefix split cannot meet an average of 1.5 bits on 1 of 1 layers");
  CHECK(ok.systems[0].requests.empty());
  CHECK(ok.systems[1].status == gpu_ndp_status::no_calibration);
  CHECK(ok.systems[2].ok());
  // A budget below the lowest bitwidth is bad input, not an infeasible problem.
  const loss_table L = losses();
  const std::array<gpu_ndp_system_config, 1> half{{{"ctx half a bit", gpu_ndp_system_kind::context_aware, 0.5}}};
  CHECK_THROWS_WITH_AS(
      static_cast<void>(replay_gpu_ndp(toy(), sys(m), m, &L, nullptr, half, {.gpu_experts_per_layer = 2})),
      "moepolicy::prefix_split: average_bits must be in [1, 32] (the lowest bitwidth to the largest there is), got 0.5",
      invalid_argument);
  const std::array<gpu_ndp_system_config, 1> ctx{{{"ctx", gpu_ndp_system_kind::context_aware, 2.0}}};
  CHECK(replay_gpu_ndp(toy(), sys(m), m, nullptr, nullptr, ctx, {}).systems[0].status ==
        gpu_ndp_status::needs_loss_table);
  // 1 GB of HBM cannot hold one layer's attention, the embedding and head (0.61 GB) and two
  // 352 MB experts.
  const auto small = replay_gpu_ndp(toy(), sys(m, 1'000'000'000ULL), m, &L, nullptr, ctx, {.gpu_experts_per_layer = 2});
  CHECK(small.systems[0].status == gpu_ndp_status::does_not_fit);
  CHECK(small.systems[0].status_detail == "HBM holds 1.00 GB; K = 2 needs 1.31 GB; at most K = 1 fits");
  CHECK(small.hbm_needed_bytes == non_expert_weight_bytes(m) + 2 * expert_bytes(m, fp16) + 7 * kv_bytes_per_token(m));
  CHECK(small.hbm_needed_bytes > small.hbm_capacity_bytes);
  CHECK(small.systems[0].requests.empty());
}

TEST_CASE("a calibration set gives the static placement and the initial GPU set, loaded at startup") {
  const model_shape m = toy_shape();
  const auto s = sys(m);
  const std::array<gpu_ndp_system_config, 2> systems{{
      {"static", gpu_ndp_system_kind::static_placement, 2.0, bitwidth{2}},
      {"monde", gpu_ndp_system_kind::monde},
  }};
  // Three requests; the first calibrates (experts 0, 1, 2 used, 0 most).
  const auto res =
      replay_gpu_ndp(toy(3), s, m, nullptr, nullptr, systems, {.gpu_experts_per_layer = 1, .calibration_requests = 1});
  CHECK(res.calibration == "requests r0");
  CHECK(res.requests.size() == 2);
  const bytes w = s.gpu().footprint_bytes({0, 0}, fp16);
  for (const auto& r : res.systems) {
    INFO(r.config.label);
    REQUIRE(r.ok());
    CHECK(r.requests.size() == 2);
    CHECK(r.startup_bytes == w);
    CHECK(r.startup_seconds == doctest::Approx(static_cast<double>(w) / 32e9 + 1e-6));
    // The startup is not a request's cost: the requests' ledger has no placement bytes.
    CHECK(r.accounts.link_bytes(cost_kind::placement) == 0);
  }
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_gpu_ndp(toy(2), s, m, nullptr, nullptr, systems,
                                                        {.gpu_experts_per_layer = 1, .calibration_requests = 2})),
                       "moepolicy::replay_gpu_ndp: calibration_requests must leave a request to measure; requests "
                       "with prefill and decode 2, calibration_requests, got 2",
                       invalid_argument);
}

TEST_CASE("longer outputs loop the recorded decode steps; the shape must match the trace") {
  const model_shape m = toy_shape();
  const auto s = sys(m);
  const std::array<gpu_ndp_system_config, 1> systems{{{"u2", gpu_ndp_system_kind::uniform_bits, 2.0, bitwidth{2}}}};
  const auto res = replay_gpu_ndp(toy(), s, m, nullptr, nullptr, systems,
                                  {.gpu_experts_per_layer = 2, .prompt_tokens = 6, .output_tokens = 10});
  CHECK(res.requests[0].prefill_tokens == 6);
  CHECK(res.systems[0].requests[0].decode_steps == 10);
  model_shape other = m;
  other.num_experts = 8;
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_gpu_ndp(toy(), s, other, nullptr, nullptr, systems, {})),
                       "moepolicy::replay_gpu_ndp: the trace's layers x experts must match the model's 1 x 8, trace "
                       "layers, got 1",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(
      static_cast<void>(replay_gpu_ndp(toy(), s, m, nullptr, nullptr, systems, {.gpu_experts_per_layer = 5})),
      "moepolicy::replay_gpu_ndp: gpu_experts_per_layer must be <= the experts per layer 4, got 5", invalid_argument);
}
