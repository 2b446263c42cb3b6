// Costs of the context-aware placement policies (Context-Aware GPU-NDP): the routing-statistics
// collector per batch, importance scoring + placement of a whole model, and prefix split
// beside the exact allocation. Each policy sits beside a floor that only reads the same
// inputs once; the ratio policy/floor is the figure the README quotes.
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <random>
#include <vector>

#include <Eigen/Core>

#include "bundled_trace.hpp"
#include "moepolicy/place/prefill_placement.hpp"
#include "moepolicy/quant/detail/exact_allocation_reference.hpp"
#include "moepolicy/quant/detail/prefix_split_reference.hpp"
#include "moepolicy/quant/exact_allocation.hpp"
#include "moepolicy/quant/prefix_split.hpp"
#include "moepolicy/stats/routing_stats.hpp"
#include "moepolicy/trace/canonical.hpp"

namespace {

using namespace moepolicy;

const routing_trace& granite() { return moepolicy::bench::bundled_granite(); }

// Collector ingest over every batch of the bundled Granite trace (real routing).
void BM_collector_observe(benchmark::State& state) {
  const routing_trace& t = granite();
  routing_stats_collector c(t.info().num_layers, t.info().num_experts);
  for (auto _ : state) {
    for (const auto& b : t.batches()) c.observe(t.view(b));
    benchmark::DoNotOptimize(c.counts(phase::prefill).data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(t.num_rows()));
  state.SetLabel("Granite bundled trace, records");
}
BENCHMARK(BM_collector_observe);

void BM_collector_floor(benchmark::State& state) {
  const routing_trace& t = granite();
  for (auto _ : state) {
    const bench::routing_sums sums = bench::read_routing_once(t);
    benchmark::DoNotOptimize(sums.ids);
    benchmark::DoNotOptimize(sums.weights);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(t.num_rows()));
  state.SetLabel("floor: read the same ids and weights");
}
BENCHMARK(BM_collector_floor);

struct model_case {
  const char* name;
  int layers, experts, gpu;
};
constexpr std::array<model_case, 3> model_cases{
    {{"Mixtral-8x7B", 32, 8, 4}, {"Qwen3-235B", 94, 128, 32}, {"DeepSeek-V3", 58, 256, 64}}};

struct placement_input {
  Eigen::MatrixXd P, W;
  loss_table losses;
};

// Synthetic prefill statistics and losses at a model's shape (sizes sweep; no quality claim).
placement_input make_input(const model_case& m) {
  std::mt19937 rng(42);
  std::gamma_distribution<double> skew(0.6, 1.0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  placement_input in{Eigen::MatrixXd(m.layers, m.experts), Eigen::MatrixXd(m.layers, m.experts), {}};
  std::vector<double> loss;
  for (int l = 0; l < m.layers; ++l) {
    for (int e = 0; e < m.experts; ++e) {
      in.P(l, e) = std::floor(100.0 * skew(rng));
      in.W(l, e) = in.P(l, e) * (0.2 + 0.6 * u(rng));
      double v = 1000.0 * (1.0 + u(rng));
      for (int b = 0; b < 4; ++b, v *= 0.5) loss.push_back(v);
    }
  }
  in.losses = loss_table(static_cast<std::size_t>(m.layers), static_cast<std::size_t>(m.experts),
                         {bitwidth{1}, bitwidth{2}, bitwidth{3}, bitwidth{4}}, loss);
  return in;
}

void BM_place_from_prefill(benchmark::State& state) {
  const auto& m = model_cases[static_cast<std::size_t>(state.range(0))];
  const placement_input in = make_input(m);
  const prefill_placement_config config{.gpu_experts_per_layer = static_cast<std::size_t>(m.gpu),
                                        .ndp_average_bits = 2.5};
  for (auto _ : state) {
    auto plan = place_from_prefill(in.P, in.W, &in.losses, config);
    benchmark::DoNotOptimize(plan);
  }
  state.SetItemsProcessed(state.iterations() * m.layers);
  state.SetLabel(std::string(m.name) + " shape, synthetic statistics; items = layers");
}
BENCHMARK(BM_place_from_prefill)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);

void BM_place_floor(benchmark::State& state) {
  const auto& m = model_cases[static_cast<std::size_t>(state.range(0))];
  const placement_input in = make_input(m);
  for (auto _ : state) {
    double s = in.P.sum() + in.W.sum();
    for (std::size_t l = 0; l < in.losses.num_layers(); ++l) {
      for (std::size_t e = 0; e < in.losses.num_experts(); ++e) {
        for (double x : in.losses.losses_of(l, e)) s += x;
      }
    }
    benchmark::DoNotOptimize(s);
  }
  state.SetItemsProcessed(state.iterations() * m.layers);
  state.SetLabel(std::string("floor: read P, W and the loss table, ") + m.name);
}
BENCHMARK(BM_place_floor)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);

const std::array<bitwidth, 4> bits{bitwidth{1}, bitwidth{2}, bitwidth{3}, bitwidth{4}};

Eigen::MatrixXd layer_losses(Eigen::Index experts) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Eigen::MatrixXd L(experts, 4);
  for (Eigen::Index e = 0; e < experts; ++e) {
    double v = 1000.0 * (1.0 + u(rng));
    for (Eigen::Index b = 0; b < 4; ++b, v *= 0.3 + 0.4 * u(rng)) L(e, b) = v;
  }
  return L;
}

void BM_prefix_split(benchmark::State& state) {
  const Eigen::MatrixXd L = layer_losses(state.range(0));
  prefix_split_workspace ws;
  bit_allocation out;
  for (auto _ : state) {
    prefix_split(bits, L, 2.5, {}, {}, ws, out);
    benchmark::DoNotOptimize(out.gain);
  }
  state.SetLabel("E_NDP experts, bits {1,2,3,4}, average 2.5, workspace reused");
}
BENCHMARK(BM_prefix_split)->Arg(8)->Arg(32)->Arg(128)->Arg(256)->Unit(benchmark::kMicrosecond);

void BM_prefix_split_reference(benchmark::State& state) {
  const Eigen::MatrixXd L = layer_losses(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(reference::prefix_split(bits, L, 2.5));
  state.SetLabel("the first implementation (quant/detail/prefix_split_reference.hpp)");
}
BENCHMARK(BM_prefix_split_reference)->Arg(8)->Arg(32)->Arg(128)->Arg(256)->Unit(benchmark::kMicrosecond);

void BM_exact_allocation(benchmark::State& state) {
  const Eigen::MatrixXd L = layer_losses(state.range(0));
  exact_allocation_workspace ws;
  bit_allocation out;
  for (auto _ : state) {
    exact_allocation(bits, L, 2.5, {}, {}, {}, exact_method::automatic, ws, out);
    benchmark::DoNotOptimize(out.gain);
  }
  state.SetLabel("E_NDP experts, bits {1,2,3,4}, average 2.5, not convex: the DP, workspace reused");
}
BENCHMARK(BM_exact_allocation)->Arg(8)->Arg(32)->Arg(128)->Arg(256)->Unit(benchmark::kMicrosecond);

void BM_exact_allocation_reference(benchmark::State& state) {
  const Eigen::MatrixXd L = layer_losses(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(reference::exact_allocation(bits, L, 2.5));
  state.SetLabel("the first implementation (quant/detail/exact_allocation_reference.hpp)");
}
BENCHMARK(BM_exact_allocation_reference)->Arg(8)->Arg(32)->Arg(128)->Arg(256)->Unit(benchmark::kMicrosecond);

void BM_allocation_floor(benchmark::State& state) {
  const Eigen::MatrixXd L = layer_losses(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(L.sum());
  state.SetLabel("floor: read the layer's loss table once");
}
BENCHMARK(BM_allocation_floor)->Arg(8)->Arg(32)->Arg(128)->Arg(256)->Unit(benchmark::kMicrosecond);

}  // namespace
