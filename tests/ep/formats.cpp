// The placement files of the engines, pinned on a small placement.
#include <doctest/doctest.h>

#include <sstream>
#include <vector>

#include "moepolicy/ep/deepseek_eplb.hpp"
#include "moepolicy/ep/formats.hpp"
#include "test_support.hpp"

using namespace moepolicy;

namespace {

ep_placement small() {
  // Two layers of 3 experts on 2 GPUs of 2 slots (EPLB's global policy). Layer 0: expert 0
  // (load 9) gets the spare slot; replicas 4.5, 4.5, 2, 1 pack as {4.5, 2} and {4.5, 1}.
  const std::vector<double> w = {9, 1, 2, 1, 1, 8};
  return deepseek_rebalance(ep_load_view(w, 2, 3), {.replicas = 4, .gpus = 2});
}

}  // namespace

TEST_CASE("DeepSeek EPLB's three maps") {
  std::ostringstream os;
  write_ep_deepseek_json(os, small());
  CHECK(os.str() ==
        "{\n"
        "  \"physical_to_logical\": [\n"
        "    [0, 2, 0, 1],\n"
        "    [2, 0, 2, 1]\n"
        "  ],\n"
        "  \"logical_to_physical\": [\n"
        "    [[0, 2], [3, -1], [1, -1]],\n"
        "    [[1, -1], [3, -1], [0, 2]]\n"
        "  ],\n"
        "  \"logical_count\": [\n"
        "    [2, 1, 1],\n"
        "    [1, 1, 2]\n"
        "  ]\n"
        "}\n");
}

TEST_CASE("SGLang's --init-expert-location file holds physical_to_logical_map only") {
  std::ostringstream os;
  write_ep_sglang_json(os, small());
  CHECK(os.str() == "{\"physical_to_logical_map\": [\n  [0, 2, 0, 1],\n  [2, 0, 2, 1]\n]}\n");
}

TEST_CASE("the vLLM Ascend expert_map_path file: device_expert per device") {
  std::ostringstream os;
  write_ep_vllm_json(os, small(), 2);
  CHECK(os.str() ==
        "{\n"
        "  \"moe_layer_count\": 2,\n"
        "  \"layer_list\": [\n"
        "    {\"layer_id\": 0, \"device_count\": 2, \"device_list\": [\n"
        "      {\"device_id\": 0, \"device_expert\": [0, 2]},\n"
        "      {\"device_id\": 1, \"device_expert\": [0, 1]}\n"
        "    ]},\n"
        "    {\"layer_id\": 1, \"device_count\": 2, \"device_list\": [\n"
        "      {\"device_id\": 0, \"device_expert\": [2, 0]},\n"
        "      {\"device_id\": 1, \"device_expert\": [2, 1]}\n"
        "    ]}\n"
        "  ]\n"
        "}\n");
  std::ostringstream bad;
  CHECK_THROWS_WITH_AS(write_ep_vllm_json(bad, small(), 3), "moepolicy::write_ep_vllm_json: gpus must divide the 4 slots, got 3",
                       invalid_argument);
}
