// Sample specs of every chart kind, shaped like the report's data (synthetic, fixed
// numbers), shared by the SVG tests and the sample writer.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "report/svg.hpp"

namespace moepolicy::test::svg_samples {

namespace svg = moepolicy::examples::svg;

/// Hit ratio against cache capacity per eviction policy, with Belady dashed.
inline svg::line_chart_spec hit_ratio() {
  svg::line_chart_spec spec;
  spec.title = "Hit ratio vs cache capacity (granite-3.1-1b-a400m, decode)";
  spec.x_label = "cache capacity (experts per layer)";
  spec.y_label = "hit ratio";
  spec.x_scale = svg::axis_scale::log2;
  spec.y_range = svg::value_range{0.0, 1.0};
  const std::vector<double> caps = {2, 4, 8, 16, 32};
  const std::vector<std::pair<std::string, double>> policies = {
      {"LRU", 0.9}, {"LFU", 0.85}, {"FIFO", 0.93}, {"score-aware", 0.75}};
  for (const auto& [name, k] : policies) {
    svg::series s{name, caps, {}, svg::line_style::solid, true, {}};
    for (const double c : caps)
      s.y.push_back(1.0 - std::pow(k, std::log2(c) + 1.0) * 0.9 * (name == "FIFO" ? 0.97 : 1.0) * 0.999);
    spec.lines.push_back(std::move(s));
  }
  svg::series belady{"Belady (optimal)", caps, {}, svg::line_style::dashed, true, "#222222"};
  for (const double c : caps) belady.y.push_back(1.0 - std::pow(0.62, std::log2(c) + 1.0) * 0.9);
  spec.lines.push_back(std::move(belady));
  return spec;
}

/// Prefill-decode routing similarity per layer, with one layer missing (a NaN gap).
inline svg::line_chart_spec similarity() {
  svg::line_chart_spec spec;
  spec.title = "Prefill \xE2\x86\x94 decode expert similarity per layer";
  spec.x_label = "MoE layer";
  spec.y_label = "cosine similarity";
  spec.y_range = svg::value_range{0.0, 1.0};
  svg::series a{"granite", {}, {}, svg::line_style::solid, false, {}};
  svg::series b{"mixtral", {}, {}, svg::line_style::solid, true, {}};
  for (int l = 0; l < 24; ++l) {
    a.x.push_back(l);
    a.y.push_back(l == 11 ? std::nan("") : 0.55 + 0.3 * std::sin(l * 0.4) * std::exp(-l / 30.0));
  }
  for (int l = 0; l < 32; l += 1) {
    b.x.push_back(l * 23.0 / 31.0);
    b.y.push_back(0.8 - 0.01 * l);
  }
  spec.lines = {a, b};
  return spec;
}

/// High-precision share and churn over time per residency policy, two stacked panels.
inline svg::line_panels_spec residency() {
  svg::line_panels_spec spec;
  spec.title = "DynaExq residency over the stream";
  const std::vector<std::string> policies = {"static top-k", "EMA hotness", "DynaExq"};
  svg::line_chart_spec share;
  share.title = "high-precision share of activations";
  share.y_label = "share";
  share.y_range = svg::value_range{0.0, 1.0};
  share.height = 240;
  svg::line_chart_spec churn;
  churn.title = "churn (promotions + demotions per pass)";
  churn.x_label = "forward pass";
  churn.y_label = "experts moved";
  churn.height = 260;
  for (std::size_t p = 0; p < policies.size(); ++p) {
    svg::series s{policies[p], {}, {}, svg::line_style::solid, false, {}};
    svg::series c{policies[p], {}, {}, p == 0 ? svg::line_style::dashed : svg::line_style::solid, false, {}};
    for (int t = 0; t < 136; ++t) {
      s.x.push_back(t);
      s.y.push_back(0.4 + 0.15 * static_cast<double>(p) + 0.1 * std::sin(t / 9.0 + static_cast<double>(p)));
      c.x.push_back(t);
      c.y.push_back(p == 0 ? 0.0 : std::fabs(8.0 * std::sin(t / 5.0) / static_cast<double>(p)));
    }
    share.lines.push_back(std::move(s));
    churn.lines.push_back(std::move(c));
  }
  spec.panels = {share, churn};
  return spec;
}

/// Expert activations per decode step, one panel per layer.
inline svg::heatmap_grid_spec activations(std::size_t layers, std::size_t experts, std::size_t steps) {
  svg::heatmap_grid_spec spec;
  spec.title = "Expert activations per decode step";
  spec.value_label = "activations";
  spec.columns = layers >= 6 ? 6 : 0;
  spec.panel_width = layers == 1 ? 320 : 96;
  spec.panel_height = layers == 1 ? 160 : 96;
  for (std::size_t l = 0; l < layers; ++l) {
    svg::heatmap_panel p{"layer " + std::to_string(l), {}};
    for (std::size_t e = 0; e < experts; ++e) {
      auto& row = p.values.emplace_back();
      for (std::size_t s = 0; s < steps; ++s) {
        const std::size_t h = (e * 7 + s * 3 + l * 5) % 11;
        row.push_back(h < 3 ? static_cast<double>(h + (e % 4 == l % 4 ? 4 : 0)) : 0.0);
      }
    }
    spec.panels.push_back(std::move(p));
  }
  return spec;
}

/// Per-layer latency split by device for three systems.
inline svg::stacked_bars_spec latency_split(std::size_t layers) {
  svg::stacked_bars_spec spec;
  spec.title = "Per-layer MoE latency by device (B = 32)";
  spec.x_label = "MoE layer";
  spec.y_label = "latency (ms)";
  spec.bars = {"GPU+CPU", "GPU+NDP", "TriMoE"};
  spec.segments = {"GPU", "CPU", "NDP"};
  for (std::size_t l = 0; l < layers; ++l) {
    spec.categories.push_back(std::to_string(l));
    const double d = static_cast<double>(l % 5);
    spec.values.push_back({{1.2 + 0.1 * d, 2.0 - 0.2 * d, 0.0}, {1.1, 0.0, 1.6 + 0.1 * d}, {0.9, 0.5 + 0.05 * d, 0.6}});
  }
  return spec;
}

/// Single-value bars per system.
inline svg::grouped_bars_spec makespan() {
  svg::grouped_bars_spec spec;
  spec.title = "Decode step makespan";
  spec.x_label = "batch size";
  spec.y_label = "makespan (us)";
  spec.categories = {"1", "8", "32", "128"};
  spec.bars = {"GPU only", "greedy", "refined", "exact"};
  spec.values = {{410, 380, 372, 370}, {980, 760, 731, 725}, {2400, 1650, 1580, 1544}, {8100, 5200, 4980, 4900}};
  return spec;
}

}  // namespace moepolicy::test::svg_samples
