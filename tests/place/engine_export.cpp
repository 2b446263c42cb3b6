// Engine settings from a placement (moepolicy/place/engine_export.hpp): the whole-layer
// split and its budget, llama.cpp's arguments and KTransformers' rules, each pinned by a
// small expected file in tests/data/place/.
#include "moepolicy/place/engine_export.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "test_support.hpp"

using moepolicy::split_whole_layers;

namespace {

std::string expected(const std::string& name) {
  std::ifstream in(moepolicy::test::test_data() / "place" / name, std::ios::binary);
  REQUIRE(in);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

std::string joined(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) out += (out.empty() ? "" : " ") + a;
  return out + "\n";
}

}  // namespace

TEST_CASE("engine_export: DeepSeek-V2-Lite, 16 of 64 experts per layer: 6 whole layers, the last ones") {
  // 26 MoE layers after 1 dense block; S = 26 * 16 = 416 GPU experts = 6 layers of 64 + 32.
  const std::vector<std::size_t> gpu(26, 16);
  const auto s = split_whole_layers(gpu, 64, {}, 1);
  CHECK(s.placement_gpu_experts == 416);
  CHECK(s.gpu_layers == 6);
  CHECK(s.unused_gpu_experts == 32);
  CHECK(s.cpu_layers_are_prefix());
  CHECK(s.blocks(true) == std::vector<std::size_t>{21, 22, 23, 24, 25, 26});
  CHECK(joined(moepolicy::llamacpp_args(s)) == expected("llamacpp_deepseek_v2_lite.txt"));
  CHECK(moepolicy::ktransformers_rules(s) == expected("ktransformers_deepseek_v2_lite.yaml"));
}

TEST_CASE("engine_export: the layers with the most tokens go to the GPU, -ot names the others") {
  const std::vector<std::size_t> gpu{8, 0, 4, 4};
  const std::vector<double> tokens{10, 40, 30, 5};
  const auto s = split_whole_layers(gpu, 8, tokens);
  CHECK(s.gpu_layers == 2);
  CHECK(s.unused_gpu_experts == 0);
  CHECK_FALSE(s.cpu_layers_are_prefix());
  const auto args = moepolicy::llamacpp_args(s);
  CHECK(joined(args) == expected("llamacpp_by_tokens.txt"));
  // The pattern selects exactly the expert tensors of blocks 0 and 3, as llama.cpp's
  // std::regex_search does.
  const std::string pattern = args.back().substr(0, args.back().rfind('='));
  const std::regex re(pattern);
  for (const char* name : {"blk.0.ffn_up_exps.weight", "blk.3.ffn_down_exps.weight", "blk.3.ffn_gate_up_exps.weight",
                           "blk.0.ffn_gate_chexps.weight"}) {
    CHECK_MESSAGE(std::regex_search(name, re), name);
  }
  for (const char* name : {"blk.1.ffn_up_exps.weight", "blk.13.ffn_up_exps.weight", "blk.30.ffn_up_exps.weight",
                           "blk.3.ffn_up_shexp.weight", "blk.3.attn_q.weight"}) {
    CHECK_MESSAGE(!std::regex_search(name, re), name);
  }
}

TEST_CASE("engine_export: Mixtral's experts module, one layer, and the edge budgets") {
  const auto one = split_whole_layers(std::vector<std::size_t>{2, 2, 2, 3}, 8, std::vector<double>{1, 1, 5, 1});
  CHECK(one.gpu_layers == 1);
  CHECK(one.unused_gpu_experts == 1);
  CHECK(moepolicy::ktransformers_rules(one, "block_sparse_moe.experts") ==
        expected("ktransformers_mixtral_one_layer.yaml"));
  // Below one layer's worth: nothing moves, and the whole budget is reported unused.
  const auto none = split_whole_layers(std::vector<std::size_t>{3, 4}, 8);
  CHECK(none.gpu_layers == 0);
  CHECK(none.unused_gpu_experts == 7);
  CHECK(moepolicy::ktransformers_rules(none).empty());
  CHECK(joined(moepolicy::llamacpp_args(none)) == "--n-gpu-layers 999 --n-cpu-moe 2\n");
  // Everything on the GPU: no override at all.
  const auto all = split_whole_layers(std::vector<std::size_t>{8, 8}, 8);
  CHECK(joined(moepolicy::llamacpp_args(all)) == "--n-gpu-layers 999\n");
}

TEST_CASE("engine_export: bad input names the function and the value") {
  CHECK_THROWS_WITH_AS(static_cast<void>(split_whole_layers(std::vector<std::size_t>{}, 8)),
                       "moepolicy::split_whole_layers: at least one MoE layer is needed, got 0",
                       moepolicy::invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(split_whole_layers(std::vector<std::size_t>{9}, 8)),
                       "moepolicy::split_whole_layers: layer 0 has more GPU experts than experts_per_layer, got 9",
                       moepolicy::invalid_argument);
  CHECK_THROWS_WITH_AS(
      static_cast<void>(split_whole_layers(std::vector<std::size_t>{1, 1}, 8, std::vector<double>{1})),
      "moepolicy::split_whole_layers: layer_tokens must be empty or hold one entry per MoE layer, got 1",
      moepolicy::invalid_argument);
}
