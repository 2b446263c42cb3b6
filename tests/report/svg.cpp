// The report's SVG plots: every chart kind is a well-formed SVG document with the expected
// elements, text is escaped, output is deterministic, and bad specs throw exact messages.
#include "report/svg.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "svg_samples.hpp"
#include "xml_check.hpp"

namespace svg = moepolicy::examples::svg;
namespace samples = moepolicy::test::svg_samples;
using moepolicy::test::check_xml;

namespace {

std::size_t count(std::string_view doc, std::string_view what) {
  std::size_t n = 0;
  for (std::size_t at = doc.find(what); at != std::string_view::npos; at = doc.find(what, at + what.size())) ++n;
  return n;
}

bool contains(std::string_view doc, std::string_view what) { return doc.find(what) != std::string_view::npos; }

/// Checks that `doc` is a well-formed SVG document and returns its element count.
std::size_t check_svg_document(const std::string& doc) {
  const auto r = check_xml(doc);
  INFO(r.error, " on line ", r.line);
  CHECK(r.ok);
  CHECK(r.root == "svg");
  CHECK(contains(doc, "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\""));
  CHECK(contains(doc, " viewBox=\"0 0 "));
  CHECK(count(doc, "<title>") == 1);
  CHECK(doc.back() == '\n');
  return r.elements;
}

svg::line_chart_spec two_lines() {
  svg::line_chart_spec spec;
  spec.title = "t";
  spec.x_label = "capacity";
  spec.y_label = "hit ratio";
  spec.lines = {{"LRU", {1, 2, 4, 8}, {0.1, 0.2, 0.4, 0.5}, svg::line_style::solid, true, {}},
                {"Belady", {1, 2, 4, 8}, {0.3, 0.5, 0.7, 0.8}, svg::line_style::dashed, false, "#222222"}};
  return spec;
}

svg::stacked_bars_spec small_stack() {
  svg::stacked_bars_spec spec;
  spec.title = "latency";
  spec.x_label = "layer";
  spec.y_label = "ms";
  spec.categories = {"0", "1"};
  spec.bars = {"GPU+CPU", "TriMoE", "exact"};
  spec.segments = {"GPU", "CPU", "NDP"};
  spec.values = {{{1, 2, 0}, {1, 0.5, 0.5}, {0, 0, 0}}, {{1.5, 1, 0}, {1, 0.25, 0.75}, {0.5, 0.5, 0.5}}};
  return spec;
}

}  // namespace

TEST_CASE("line_chart: a well-formed document with one line, legend entry and markers per series") {
  const std::string doc = svg::line_chart(two_lines());
  CHECK(check_svg_document(doc) >= 20);
  CHECK(contains(doc, "<title>t</title>"));
  CHECK(count(doc, "<g class=\"series\"") == 2);
  CHECK(count(doc, "<path class=\"line\"") == 2);
  CHECK(count(doc, "<g class=\"legend-entry\"") == 2);
  CHECK(count(doc, "stroke-dasharray=\"6 3\"") == 2);  // Belady's line and its legend swatch
  CHECK(count(doc, "<circle") == 4 + 1);               // LRU's points and its legend swatch
  CHECK(count(doc, "stroke=\"#222222\"") == 2);
  CHECK(contains(doc, ">capacity</text>"));
  CHECK(contains(doc, ">hit ratio</text>"));
  CHECK(contains(doc, ">LRU</text>"));
  CHECK(contains(doc, ">Belady</text>"));
  CHECK(contains(doc, "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"11\""));
  // Automatic y range from 0, widened to a tick: 0 to 0.8 by 0.2.
  for (const char* tick : {">0</text>", ">0.2</text>", ">0.4</text>", ">0.6</text>", ">0.8</text>"}) {
    CHECK(contains(doc, tick));
  }
  CHECK(contains(doc, "text-anchor=\"end\">0.8</text>"));  // y tick labels end at the axis
  CHECK_FALSE(contains(doc, "text-anchor=\"end\">1</text>"));
}

TEST_CASE("line_chart: log2 and log10 x axes tick at powers, fixed y range") {
  svg::line_chart_spec spec = two_lines();
  spec.x_scale = svg::axis_scale::log2;
  spec.y_range = svg::value_range{0, 1};
  std::string doc = svg::line_chart(spec);
  check_svg_document(doc);
  CHECK(contains(doc, ">capacity (log2 scale)</text>"));
  for (const char* tick : {">1</text>", ">2</text>", ">4</text>", ">8</text>", ">0.2</text>", ">1</text>"}) {
    CHECK(contains(doc, tick));
  }
  spec.x_scale = svg::axis_scale::log10;
  spec.lines[0].x = {1, 10, 100, 1000};
  spec.lines[1].x = {1, 10, 100, 1000};
  doc = svg::line_chart(spec);
  check_svg_document(doc);
  CHECK(contains(doc, ">capacity (log scale)</text>"));
  for (const char* tick : {">10</text>", ">100</text>", ">1000</text>"}) CHECK(contains(doc, tick));
}

TEST_CASE("specs take partial aggregate initialization without warnings") {
  svg::line_chart_spec spec;
  spec.lines = {svg::series{"LRU", {1, 2}, {0.5, 0.6}}};
  check_svg_document(svg::line_chart(spec));  // no title: a default <title>
  CHECK(contains(svg::line_chart(spec), "<title>line chart</title>"));
  const svg::heatmap_grid_spec grid{"t", "x", "y", "v", {svg::heatmap_panel{"layer 0", {{1}}}}};
  check_svg_document(svg::heatmap_grid(grid));
}

TEST_CASE("line_chart: a NaN y is a gap that breaks the line") {
  svg::line_chart_spec spec = two_lines();
  spec.lines[0].y = {0.1, std::nan(""), 0.4, 0.5};
  const std::string doc = svg::line_chart(spec);
  check_svg_document(doc);
  const auto at = doc.find("<path class=\"line\" d=\"");
  REQUIRE(at != std::string::npos);
  const std::string d = doc.substr(at + 22, doc.find('"', at + 22) - at - 22);
  CHECK(count(d, "M") == 2);
  CHECK(count(d, "L") == 1);
  CHECK(count(doc, "<circle") == 3 + 1);  // no marker at the gap
  // A series of gaps only still draws (an empty plot for it).
  spec.lines[0].y = {std::nan(""), std::nan(""), std::nan(""), std::nan("")};
  check_svg_document(svg::line_chart(spec));
}

TEST_CASE("text is XML-escaped everywhere") {
  svg::line_chart_spec spec = two_lines();
  spec.title = "it's <b>&";
  spec.x_label = "x \"quoted\"";
  spec.lines[0].name = "a<b & \"c\"";
  const std::string doc = svg::line_chart(spec);
  check_svg_document(doc);
  CHECK(contains(doc, "<title>it&apos;s &lt;b&gt;&amp;</title>"));
  CHECK(contains(doc, ">a&lt;b &amp; &quot;c&quot;</text>"));
  CHECK(contains(doc, ">x &quot;quoted&quot;</text>"));
  CHECK_FALSE(contains(doc, "a<b"));

  // Control characters and bytes that are not UTF-8 cannot break the document.
  spec.lines[0].name = "tab\there\x01 bad\xFF\xC3 ok\xC3\xA9";
  const std::string doc2 = svg::line_chart(spec);
  check_svg_document(doc2);
  CHECK(contains(doc2, ">tab here  bad?? ok\xC3\xA9</text>"));
  CHECK(svg::detail::escape("<&>\"'") == "&lt;&amp;&gt;&quot;&apos;");
}

TEST_CASE("output is deterministic and pinned by a golden file") {
  CHECK(svg::line_chart(two_lines()) == svg::line_chart(two_lines()));
  CHECK(svg::heatmap_grid(samples::activations(3, 4, 5)) == svg::heatmap_grid(samples::activations(3, 4, 5)));
  CHECK(svg::stacked_bars(small_stack()) == svg::stacked_bars(small_stack()));

  std::string doc = svg::line_chart(two_lines());
  doc += svg::heatmap_grid(samples::activations(2, 3, 4));
  doc += svg::stacked_bars(small_stack());
  const std::filesystem::path golden = std::filesystem::path(MOEPOLICY_REPORT_TEST_DATA) / "golden_charts.svg.txt";
  if (std::getenv("MOEPOLICY_PRINT_GOLDEN") != nullptr) {
    std::ofstream(golden, std::ios::binary) << doc;
    MESSAGE("wrote ", golden.string());
    return;
  }
  std::ifstream in(golden, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "missing ", golden.string(), " (run with MOEPOLICY_PRINT_GOLDEN=1 to write it)");
  std::ostringstream expected;
  expected << in.rdbuf();
  if (expected.str() != doc) {
    std::ofstream(golden.string() + ".actual", std::ios::binary) << doc;
    FAIL("output differs from ", golden.string(), "; the actual output is in ", golden.string(),
         ".actual (regenerate on purpose with MOEPOLICY_PRINT_GOLDEN=1)");
  }
}

TEST_CASE("numbers: fixed decimals without trailing zeros, 1-2-5 steps, no locale") {
  using svg::detail::fixed;
  using svg::detail::general;
  CHECK(fixed(12.5, 2) == "12.5");
  CHECK(fixed(3.0, 2) == "3");
  CHECK(fixed(-0.001, 2) == "0");
  CHECK(fixed(100, 0) == "100");
  CHECK(fixed(0.125, 2) == "0.12");  // round half to even in binary: 0.125 is exact
  CHECK(general(0.25) == "0.25");
  CHECK(general(1e6, 4) == "1e+06");
  CHECK(general(std::nan("")) == "nan");
  CHECK(general(-std::numeric_limits<double>::infinity()) == "-inf");
  CHECK(svg::detail::num(1e9) == "1000000");

  CHECK(svg::detail::nice_step(0.7) == doctest::Approx(1));
  CHECK(svg::detail::nice_step(1.2) == doctest::Approx(2));
  CHECK(svg::detail::nice_step(3) == doctest::Approx(5));
  CHECK(svg::detail::nice_step(0.03) == doctest::Approx(0.05));
  CHECK(svg::detail::nice_step(600) == doctest::Approx(1000));

  const auto a = svg::detail::linear_axis(0, 0.93, 6, true);
  CHECK(a.lo == 0);
  CHECK(a.hi == doctest::Approx(1));
  CHECK(a.labels == std::vector<std::string>{"0", "0.2", "0.4", "0.6", "0.8", "1"});
  const auto b = svg::detail::linear_axis(0, 23, 6, false);
  CHECK(b.labels == std::vector<std::string>{"0", "5", "10", "15", "20"});
  const auto c = svg::detail::log_axis(svg::axis_scale::log2, 1, 1024, 6);
  CHECK(c.labels == std::vector<std::string>{"1", "4", "16", "64", "256", "1024"});
  const auto d = svg::detail::log_axis(svg::axis_scale::log10, 0.01, 100, 10);
  CHECK(d.labels == std::vector<std::string>{"0.01", "0.1", "1", "10", "100"});
  // x tick labels never need more room than the plot has.
  const auto e = svg::detail::fitted_x_axis(svg::axis_scale::linear, 0, 123456, 200);
  CHECK(static_cast<double>(e.labels.size()) * (e.widest_label(11) + 10) <= 200);
  CHECK(e.labels.size() >= 2);
}

TEST_CASE("colours: the sequential scale runs from white to dark blue, the palette is distinct") {
  CHECK(svg::detail::hex(svg::detail::sequential(0)) == "#ffffff");
  const auto dark = svg::detail::sequential(1);
  CHECK(dark.b > dark.r);
  CHECK(dark.r + dark.g + dark.b < 200);
  int last = 3 * 255 + 1;
  for (int i = 0; i <= 10; ++i) {  // lightness falls monotonically
    const auto c = svg::detail::sequential(i / 10.0);
    CHECK(c.r + c.g + c.b < last);
    last = c.r + c.g + c.b;
  }
  for (std::size_t i = 0; i < 12; ++i) {
    for (std::size_t j = 0; j < i; ++j) CHECK(svg::detail::palette(i) != svg::detail::palette(j));
  }
}

TEST_CASE("line_panels: stacked panels under one title, unique clip paths") {
  const std::string doc = svg::line_panels(samples::residency());
  check_svg_document(doc);
  CHECK(count(doc, "<g class=\"panel\"") == 2);
  CHECK(count(doc, "class=\"subtitle\"") == 2);
  CHECK(count(doc, "class=\"title\"") == 1);
  CHECK(count(doc, "<path class=\"line\"") == 6);
  CHECK(count(doc, "<g class=\"legend-entry\"") == 6);
  CHECK(count(doc, "<clipPath id=\"clip-0\"") == 1);
  CHECK(count(doc, "<clipPath id=\"clip-1\"") == 1);
  CHECK(contains(doc, "<title>DynaExq residency over the stream</title>"));
}

TEST_CASE("heatmap_grid: panels, cells only for non-zero values, one colour scale") {
  svg::heatmap_grid_spec spec;
  spec.title = "activations";
  spec.value_label = "count";
  spec.panels = {{"layer 0", {{0, 1}, {2, 0}}}, {"layer 1", {{0, 0}, {0, 0}}}, {"layer 2", {{1, 1, 1}, {0, 2, 2}}}};
  const std::string doc = svg::heatmap_grid(spec);
  check_svg_document(doc);
  CHECK(count(doc, "<g class=\"panel\"") == 3);
  CHECK(count(doc, "<g class=\"cells\"") == 3);
  for (const char* t : {">layer 0</text>", ">layer 1</text>", ">layer 2</text>", ">count</text>", ">expert</text>",
                        ">decode step</text>"}) {
    CHECK(contains(doc, t));
  }
  // Cells: layer 0 two, layer 1 none, layer 2 one run per row.
  CHECK(count(doc, "height=\"1\"/>") == 4);
  CHECK(contains(doc, "<rect x=\"0\" y=\"0\" width=\"3\" height=\"1\"/>"));
  CHECK(contains(doc, "<rect x=\"1\" y=\"1\" width=\"2\" height=\"1\"/>"));
  // The colour bar: max and min labels, a computed 11-stop gradient.
  CHECK(count(doc, "<stop ") == 11);
  CHECK(contains(doc, "<stop offset=\"0\" stop-color=\"#ffffff\"/>"));
  CHECK(contains(doc, ">2</text>"));
  CHECK(contains(doc, ">0</text>"));
  const std::string darkest = "<g fill=\"" + svg::detail::hex(svg::detail::sequential(1)) + "\">";
  CHECK(count(doc, darkest) == 2);  // the value 2 in layers 0 and 2

  // A fixed maximum clamps larger values to the darkest colour and labels the bar with it.
  spec.max_value = 1.5;
  const std::string clamped = svg::heatmap_grid(spec);
  check_svg_document(clamped);
  CHECK(contains(clamped, ">1.5</text>"));
  CHECK(count(clamped, darkest) == 2);
}

TEST_CASE("heatmap_grid: one panel, and the report's size of 24 layers x 32 experts x 16 steps") {
  const std::string one = svg::heatmap_grid(samples::activations(1, 8, 40));
  check_svg_document(one);
  CHECK(count(one, "<g class=\"panel\"") == 1);

  const auto spec = samples::activations(24, 32, 16);
  const std::string doc = svg::heatmap_grid(spec);
  check_svg_document(doc);
  CHECK(count(doc, "<g class=\"panel\"") == 24);
  std::size_t nonzero = 0;
  for (const auto& p : spec.panels) {
    for (const auto& row : p.values) {
      for (const double v : row) nonzero += v > 0 ? 1 : 0;
    }
  }
  CHECK(count(doc, "height=\"1\"/>") <= nonzero);
  CHECK(doc.size() < 200 * 1024);

  // Even fully dense, 12k cells of distinct values stay well under a megabyte.
  auto dense = spec;
  double v = 1;
  for (auto& p : dense.panels) {
    for (auto& row : p.values) {
      for (double& x : row) x = (v += 1);
    }
  }
  const std::string big = svg::heatmap_grid(dense);
  check_svg_document(big);
  CHECK(big.size() < 700 * 1024);
}

TEST_CASE("stacked_bars: a bar per system per category, a rect per non-zero segment, hatching and letters") {
  const auto spec = small_stack();
  const std::string doc = svg::stacked_bars(spec);
  check_svg_document(doc);
  CHECK(count(doc, "<g class=\"bar\"") == 6);
  CHECK(count(doc, "class=\"seg\"") == 2 + 3 + 0 + 2 + 3 + 3);
  CHECK(count(doc, "class=\"hatch\"") == 1 + 2);  // bars b and c, but not the empty one
  CHECK(count(doc, "<pattern id=\"hatch-") == 2);
  CHECK(count(doc, "<g class=\"legend-entry\"") == 3 + 3);
  for (const char* t : {">GPU</text>", ">CPU</text>", ">NDP</text>", ">a: GPU+CPU</text>", ">b: TriMoE</text>",
                        ">c: exact</text>", ">layer</text>", ">ms</text>", ">latency</text>"}) {
    CHECK(contains(doc, t));
  }
  CHECK(count(doc, "class=\"bar-letter\"") == 6);
  CHECK(count(doc, "class=\"category\"") == 2);
  // Tallest stack 3, so the axis runs to 3 in 0.5 steps.
  CHECK(contains(doc, ">3</text>"));
  CHECK(contains(doc, ">2.5</text>"));

  // Many narrow groups: no letters, and every k-th category label only.
  const auto wide = samples::latency_split(96);
  auto narrow = wide;
  narrow.width = 700;
  const std::string crowded = svg::stacked_bars(narrow);
  check_svg_document(crowded);
  CHECK(count(crowded, "<g class=\"bar\"") == 96 * 3);
  CHECK(count(crowded, "class=\"bar-letter\"") == 0);
  CHECK(count(crowded, "class=\"category\"") < 96);
  CHECK(count(crowded, "class=\"category\"") >= 10);

  // One bar per group: no hatching, the legend lists segments only.
  auto single = spec;
  single.bars = {"TriMoE"};
  single.values = {{{1, 2, 3}}, {{0, 1, 0}}};
  const std::string one = svg::stacked_bars(single);
  check_svg_document(one);
  CHECK(count(one, "class=\"hatch\"") == 0);
  CHECK(count(one, "<g class=\"legend-entry\"") == 3);

  // A fixed y_max clips taller bars.
  auto capped = spec;
  capped.y_max = 2;
  const std::string clipped = svg::stacked_bars(capped);
  check_svg_document(clipped);
  CHECK(contains(clipped, "clip-path=\"url(#clip-0)\""));
}

TEST_CASE("grouped_bars: single values, one colour per bar, in the legend") {
  const std::string doc = svg::grouped_bars(samples::makespan());
  check_svg_document(doc);
  CHECK(count(doc, "<g class=\"bar\"") == 16);
  CHECK(count(doc, "class=\"seg\"") == 16);
  CHECK(count(doc, "class=\"hatch\"") == 0);
  CHECK(count(doc, "<pattern") == 0);
  CHECK(count(doc, "<g class=\"legend-entry\"") == 4);
  CHECK(contains(doc, ">GPU only</text>"));
  CHECK(count(doc, "fill=\"" + svg::detail::palette(0) + "\" class=\"seg\"") == 4);
}

TEST_CASE("every sample is a well-formed SVG document") {
  check_svg_document(svg::line_chart(samples::hit_ratio()));
  check_svg_document(svg::line_chart(samples::similarity()));
  check_svg_document(svg::line_panels(samples::residency()));
  check_svg_document(svg::heatmap_grid(samples::activations(24, 32, 16)));
  check_svg_document(svg::stacked_bars(samples::latency_split(24)));
  check_svg_document(svg::grouped_bars(samples::makespan()));
}

TEST_CASE("line_chart and line_panels reject bad specs with exact messages") {
  auto spec = two_lines();
  spec.lines[0] = {"LRU", {1, 2, 3, 4, 5}, {1, 2, 3, 4}, svg::line_style::solid, false, {}};
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::line_chart(spec)),
                       "svg::line_chart: series \"LRU\" has 5 x values but 4 y values", std::invalid_argument);
  spec.lines[0] = {"LRU", {}, {}, svg::line_style::solid, false, {}};
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::line_chart(spec)), "svg::line_chart: series \"LRU\" is empty",
                       std::invalid_argument);
  spec.lines[0] = {"LRU", {1, std::nan("")}, {1, 2}, svg::line_style::solid, false, {}};
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::line_chart(spec)), "svg::line_chart: series \"LRU\" has x[1] = nan",
                       std::invalid_argument);
  spec.lines[0] = {"LRU", {1, 2, 3}, {1, 2, std::numeric_limits<double>::infinity()}, svg::line_style::solid,
                   false, {}};
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::line_chart(spec)), "svg::line_chart: series \"LRU\" has y[2] = inf",
                       std::invalid_argument);
  spec.lines[0] = {"LRU", {0, 2}, {1, 2}, svg::line_style::solid, false, "red"};
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::line_chart(spec)),
                       "svg::line_chart: series \"LRU\" has colour \"red\", not #rrggbb", std::invalid_argument);
  spec.lines[0].colour.clear();
  spec.x_scale = svg::axis_scale::log2;
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::line_chart(spec)),
                       "svg::line_chart: series \"LRU\" has x[0] = 0, not > 0 on a log axis", std::invalid_argument);
  spec = two_lines();
  spec.x_scale = svg::axis_scale::log10;
  spec.x_range = svg::value_range{0, 8};
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::line_chart(spec)),
                       "svg::line_chart: x range [0, 8] must be > 0 on a log axis", std::invalid_argument);
  spec = two_lines();
  spec.y_range = svg::value_range{1, 0};
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::line_chart(spec)),
                       "svg::line_chart: y range [1, 0] must be finite with lo < hi", std::invalid_argument);
  spec = two_lines();
  spec.width = 100;
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::line_chart(spec)), "svg::line_chart: width must be >= 240, got 100",
                       std::invalid_argument);
  spec = two_lines();
  spec.lines.clear();
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::line_chart(spec)), "svg::line_chart: no series to draw",
                       std::invalid_argument);

  svg::line_panels_spec panels;
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::line_panels(panels)), "svg::line_panels: no panels",
                       std::invalid_argument);
  panels.panels = {two_lines(), two_lines()};
  panels.panels[1].lines[1].y.pop_back();
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::line_panels(panels)),
                       "svg::line_panels: panel 1: series \"Belady\" has 4 x values but 3 y values",
                       std::invalid_argument);
}

TEST_CASE("heatmap_grid rejects bad specs with exact messages") {
  svg::heatmap_grid_spec spec;
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::heatmap_grid(spec)), "svg::heatmap_grid: no panels",
                       std::invalid_argument);
  spec.panels = {{"layer 0", {{1, 2}, {3, 4}}}, {"layer 3", {{1, 2}, {3, 4}, {5}}}};
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::heatmap_grid(spec)),
                       "svg::heatmap_grid: panel \"layer 3\" row 2 has 1 values but row 0 has 2",
                       std::invalid_argument);
  spec.panels = {{"layer 0", {{1, 2}, {-1, 4}}}};
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::heatmap_grid(spec)),
                       "svg::heatmap_grid: panel \"layer 0\" has value -1 at row 1, column 0, not finite and >= 0",
                       std::invalid_argument);
  spec.panels = {{"layer 0", {{1, std::nan("")}}}};
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::heatmap_grid(spec)),
                       "svg::heatmap_grid: panel \"layer 0\" has value nan at row 0, column 1, not finite and >= 0",
                       std::invalid_argument);
  spec.panels = {{"layer 0", {}}};
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::heatmap_grid(spec)), "svg::heatmap_grid: panel \"layer 0\" has no rows",
                       std::invalid_argument);
  spec.panels = {{"layer 0", {{}}}};
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::heatmap_grid(spec)),
                       "svg::heatmap_grid: panel \"layer 0\" has no columns", std::invalid_argument);
  spec.panels = {{"layer 0", {{1}}}};
  spec.max_value = 0;
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::heatmap_grid(spec)),
                       "svg::heatmap_grid: max_value must be finite and > 0, got 0", std::invalid_argument);
  spec.max_value.reset();
  spec.panel_width = 2;
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::heatmap_grid(spec)), "svg::heatmap_grid: panel_width must be >= 8, got 2",
                       std::invalid_argument);
  spec.panel_width = 120;
  spec.panels = {{"big", std::vector<std::vector<double>>(1025, std::vector<double>(1024, 0.0))}};
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::heatmap_grid(spec)),
                       "svg::heatmap_grid: more than 1048576 cells in all, at panel \"big\"", std::invalid_argument);
}

TEST_CASE("stacked_bars and grouped_bars reject bad specs with exact messages") {
  auto spec = small_stack();
  spec.values[1][1][1] = -0.5;
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::stacked_bars(spec)),
                       "svg::stacked_bars: category \"1\", bar \"TriMoE\", segment \"CPU\" has value -0.5, not finite "
                       "and >= 0",
                       std::invalid_argument);
  spec = small_stack();
  spec.values[0][2].pop_back();
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::stacked_bars(spec)),
                       "svg::stacked_bars: category \"0\", bar \"exact\" has 2 segments but segments has 3 names",
                       std::invalid_argument);
  spec = small_stack();
  spec.values[1].pop_back();
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::stacked_bars(spec)),
                       "svg::stacked_bars: category \"1\" has 2 bars but bars has 3 names", std::invalid_argument);
  spec = small_stack();
  spec.categories.push_back("2");
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::stacked_bars(spec)),
                       "svg::stacked_bars: values has 2 categories but categories has 3 names", std::invalid_argument);
  spec = small_stack();
  spec.segments.clear();
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::stacked_bars(spec)), "svg::stacked_bars: no segments",
                       std::invalid_argument);
  spec = small_stack();
  spec.bars.clear();
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::stacked_bars(spec)), "svg::stacked_bars: no bars", std::invalid_argument);
  spec = small_stack();
  spec.y_max = -1;
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::stacked_bars(spec)),
                       "svg::stacked_bars: y_max must be finite and > 0, got -1", std::invalid_argument);

  auto bars = samples::makespan();
  bars.values[1][1] = std::nan("");
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::grouped_bars(bars)),
                       "svg::grouped_bars: category \"8\", bar \"greedy\" has value nan, not finite and >= 0",
                       std::invalid_argument);
  bars = samples::makespan();
  bars.categories.clear();
  CHECK_THROWS_WITH_AS(static_cast<void>(svg::grouped_bars(bars)), "svg::grouped_bars: no categories",
                       std::invalid_argument);
}
