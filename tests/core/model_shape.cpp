#include "moepolicy/core/model_shape.hpp"

#include <doctest/doctest.h>

using namespace moepolicy;

TEST_CASE("a Mixtral-8x7B expert holds 3 x 4096 x 14336 weights") {
  const auto m = models::mixtral_8x7b();
  CHECK(m.weights_per_expert() == 176'160'768ULL);
  CHECK(expert_bytes(m, fp16) == 352'321'536ULL);  // 336 MiB
  CHECK(m.flops_per_token() == doctest::Approx(352'321'536.0));
  CHECK(m.num_moe_layers() == 32);
  // 32 layers x 8 experts x 176M = 45.1B expert parameters (Context-Aware GPU-NDP Tab. 1).
  CHECK(static_cast<double>(m.weights_per_expert()) * 32 * 8 == doctest::Approx(45.1e9).epsilon(0.001));
}

TEST_CASE("Mixtral-8x22B expert parameters match the published 135.5B") {
  const auto m = models::mixtral_8x22b();
  CHECK(static_cast<double>(m.weights_per_expert()) * 56 * 8 == doctest::Approx(135.5e9).epsilon(0.002));
}

TEST_CASE("low-bit experts pay per-group metadata") {
  const auto m = models::mixtral_8x7b();
  const std::uint64_t w = m.weights_per_expert();
  // 3 bits, groups of 128 with 32 bits of scale and zero point each.
  const std::uint64_t groups = w / 128;  // 176160768 is divisible by 128
  CHECK(expert_bytes(m, bitwidth{3}) == (w * 3 + groups * 32) / 8);
  // Without metadata the packing is exact.
  CHECK(expert_bytes(m, bitwidth{2}, {.group_size = 128, .metadata_bits = 0}) == w / 4);
  // A partial group still pays for its metadata, and bits round up to whole bytes.
  CHECK(weight_bytes(129, bitwidth{1}, {.group_size = 128, .metadata_bits = 16}) == (129 + 2 * 16 + 7) / 8);
  // At full precision there is no metadata.
  CHECK(weight_bytes(1000, fp16) == 2000);
  CHECK(weight_bytes(1000, int8, {.group_size = 128, .metadata_bits = 32, .full_precision = int8}) == 1000);
}

TEST_CASE("weight_bytes rejects metadata without groups") {
  CHECK_THROWS_WITH_AS(static_cast<void>(weight_bytes(100, bitwidth{4}, {.group_size = 0, .metadata_bits = 16})),
                       "moepolicy::weight_bytes: group_size must be > 0 when metadata_bits > 0, got 0",
                       invalid_argument);
}

TEST_CASE("every preset validates and matches the design table") {
  for (auto make : models::all) CHECK_NOTHROW(make().validate());
  const auto v3 = models::deepseek_v3();
  CHECK(v3.num_moe_layers() == 58);
  CHECK(v3.num_experts == 256);
  CHECK(v3.top_k == 8);
  CHECK(models::granite_3_1_1b_a400m().num_experts == 32);
  CHECK(models::qwen3_235b_a22b().num_layers == 94);
}

TEST_CASE("presets are found by name, ignoring case") {
  REQUIRE(models::find("mixtral-8x7b").has_value());
  CHECK(models::find("MIXTRAL-8X7B")->hidden_size == 4096);
  CHECK_FALSE(models::find("mixtral").has_value());
}

TEST_CASE("validate names the bad field") {
  model_shape s = models::olmoe_1b_7b();
  s.top_k = 65;
  CHECK_THROWS_WITH_AS(s.validate(), "moepolicy::model_shape::validate: top_k must be in [1, num_experts], got 65",
                       invalid_argument);
  s = models::olmoe_1b_7b();
  s.num_layers = 0;
  CHECK_THROWS_WITH_AS(s.validate(), "moepolicy::model_shape::validate: num_layers must be > 0, got 0",
                       invalid_argument);
  s = models::olmoe_1b_7b();
  s.num_dense_layers = 16;
  CHECK_THROWS_AS(s.validate(), invalid_argument);
}

TEST_CASE("presets describe the forward pass; a broken attention block is named") {
  for (auto make : models::all) CHECK(make().describes_forward_pass());
  CHECK(models::glm_4_5_air().attention.head_dim == 128);  // explicit, not hidden / heads
  CHECK(models::qwen3_235b_a22b().attention.num_kv_heads == 4);
  CHECK(models::deepseek_v2().dense_intermediate_size == 12288);
  model_shape s = models::mixtral_8x7b();
  s.attention.num_kv_heads = 5;
  CHECK_THROWS_WITH_AS(s.validate(), "moepolicy::model_shape::validate: attention.num_kv_heads must be > 0 and divide "
                                     "num_heads, got 5",
                       invalid_argument);
  s = models::deepseek_v3();
  s.dense_intermediate_size = 0;
  CHECK_THROWS_WITH_AS(s.validate(), "moepolicy::model_shape::validate: a model with dense layers and an attention "
                                     "block needs dense_intermediate_size > 0, got 0",
                       invalid_argument);
}

TEST_CASE("Kimi-Linear-48B-A3B: its published configuration, 20 KDA and 7 latent-attention layers") {
  const model_shape m = models::kimi_linear_48b_a3b();
  CHECK_NOTHROW(m.validate());
  CHECK(m.num_layers == 27);
  CHECK(m.num_moe_layers() == 26);  // the WARP trace's 26 routed layers
  CHECK(m.num_experts == 256);
  CHECK(m.top_k == 8);
  CHECK(m.num_shared_experts == 1);
  CHECK(m.weights_per_expert() == 3ULL * 2304 * 1024);
  CHECK(m.attention.kind == attention_kind::latent);
  CHECK(m.attention.q_lora_rank == 0);
  CHECK(m.attention.kv_elements_per_token() == 512 + 64);
  // Q direct 2304 x 32·192, KV down 2304 x 576, KV up 512 x 32·256, O 32·128 x 2304.
  CHECK(m.attention.weights(m.hidden_size) == 2304ULL * 32 * 192 + 2304ULL * 576 + 512ULL * 32 * 256 + 4096ULL * 2304);
  CHECK(m.attention.weights(m.hidden_size) == 29'114'368ULL);
  // KDA: Q, K, V, O 2304 x 4096 each, low-rank gates 2 x (2304 x 128 + 128 x 4096), beta
  // 2304 x 32, three short convolutions of 4 taps over 4096 channels.
  CHECK(m.linear_attention.weights(m.hidden_size) ==
        4ULL * 2304 * 4096 + 2 * (2304ULL * 128 + 128ULL * 4096) + 2304ULL * 32 + 3ULL * 4 * 4096);
  CHECK(m.linear_attention.weights(m.hidden_size) == 39'510'016ULL);
  CHECK(m.linear_attention.state_elements() == 32ULL * 128 * 128);
  CHECK(m.linear_attention.conv_state_elements() == 3ULL * 3 * 4096);
  CHECK(m.linear_attention.flops_per_token() == 7.0 * 32 * 128 * 128);
  // full_attn_layers [4, 8, 12, 16, 20, 24, 27], 1-based: the rest, dense layer 0 included, are KDA.
  CHECK(m.linear_attention_layers.size() == 20);
  CHECK(m.num_full_attention_layers() == 7);
  for (std::uint32_t full : {3U, 7U, 11U, 15U, 19U, 23U, 26U}) CHECK_FALSE(m.is_linear_attention_layer(full));
  for (std::uint32_t kda : {0U, 1U, 2U, 4U, 22U, 24U, 25U}) CHECK(m.is_linear_attention_layer(kda));
  CHECK_FALSE(models::deepseek_v3().is_linear_attention_layer(0));
  // Activated parameters a token: 8 routed + 1 shared expert in 26 layers, the dense FFN,
  // 27 attention blocks, the routers and the output head: the "A3B" of the name.
  const double activated = 9.0 * 26 * static_cast<double>(m.weights_per_expert()) + 3.0 * 2304 * 9216 +
                           7.0 * 29'114'368 + 20.0 * 39'510'016 + 26.0 * 2304 * 256 + 163840.0 * 2304;
  CHECK(activated == doctest::Approx(3.0e9).epsilon(0.05));
  CHECK(models::find("kimi-linear-48b-a3b").has_value());
}

TEST_CASE("validate names a bad linear-attention layer list") {
  model_shape s = models::kimi_linear_48b_a3b();
  s.linear_attention_layers.push_back(27);
  CHECK_THROWS_WITH_AS(s.validate(), "moepolicy::model_shape::validate: linear_attention_layers must be < num_layers, "
                                     "got 27",
                       invalid_argument);
  s = models::kimi_linear_48b_a3b();
  s.linear_attention_layers[1] = 0;
  CHECK_THROWS_WITH_AS(s.validate(), "moepolicy::model_shape::validate: linear_attention_layers must be strictly "
                                     "ascending, got 0",
                       invalid_argument);
  s = models::kimi_linear_48b_a3b();
  s.linear_attention = {};
  CHECK_THROWS_WITH_AS(s.validate(), "moepolicy::model_shape::validate: linear_attention_layers needs "
                                     "linear_attention.num_heads and head_dim > 0, got 0",
                       invalid_argument);
}
