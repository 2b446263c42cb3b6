// A consumer of the package: prices a Mixtral-8x7B expert fetch on the H100 preset.
#include <moepolicy/cost/presets.hpp>
#include <moepolicy/cost/roofline.hpp>

#include <cstdio>

int main() {
  const moepolicy::roofline_cost gpu{moepolicy::presets::h100_pcie_gen5(), moepolicy::models::mixtral_8x7b()};
  const double t = gpu.transfer_seconds(gpu.footprint_bytes({0, 0}, moepolicy::fp16));
  std::printf("consumer ok: Mixtral-8x7B FP16 expert over PCIe 5.0 in %.3f ms\n", t * 1e3);
  return t > 0.0 ? 0 : 1;
}
