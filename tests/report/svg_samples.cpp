// svg_samples <dir>: writes one sample of each chart kind into <dir> (created if need be),
// for check_svg and for looking at.
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>

#include "svg_samples.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: svg_samples <dir>\n";
    return 2;
  }
  namespace svg = moepolicy::examples::svg;
  namespace samples = moepolicy::test::svg_samples;
  try {
    const std::filesystem::path dir = argv[1];
    std::filesystem::create_directories(dir);
    const auto write = [&dir](const std::string& name, const std::string& doc) {
      std::ofstream out(dir / name, std::ios::binary);
      out << doc;
      if (!out) throw std::runtime_error("cannot write " + (dir / name).string());
      std::cout << (dir / name).string() << ": " << doc.size() << " bytes\n";
    };
    write("hit_ratio.svg", svg::line_chart(samples::hit_ratio()));
    write("similarity.svg", svg::line_chart(samples::similarity()));
    write("residency_panels.svg", svg::line_panels(samples::residency()));
    write("activations_grid.svg", svg::heatmap_grid(samples::activations(24, 32, 16)));
    write("activations_one.svg", svg::heatmap_grid(samples::activations(1, 8, 40)));
    write("latency_stacked.svg", svg::stacked_bars(samples::latency_split(24)));
    write("latency_stacked_few.svg", svg::stacked_bars(samples::latency_split(4)));
    write("makespan_bars.svg", svg::grouped_bars(samples::makespan()));
  } catch (const std::exception& e) {
    std::cerr << "svg_samples: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
