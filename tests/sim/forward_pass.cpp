#include "moepolicy/sim/forward_pass.hpp"

#include <doctest/doctest.h>

#include <array>

#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"

using namespace moepolicy;

TEST_CASE("Mixtral-8x7B's attention: 42M weights a layer, 4 KiB of KV cache a token a layer") {
  const model_shape m = models::mixtral_8x7b();
  // Q 4096x4096, K and V 4096x1024 each, O 4096x4096.
  CHECK(m.attention.weights(m.hidden_size) == 4096ULL * 4096 * 2 + 4096ULL * 1024 * 2);
  CHECK(m.attention.kv_elements_per_token() == 2 * 8 * 128);
  CHECK(m.attention.flops_per_cached_token() == 4.0 * 32 * 128);
  // One decode token whose sequence has 99 tokens cached: it attends to 100.
  const std::array<std::uint64_t, 1> context{99};
  const std::uint64_t reads = decode_cached_reads(context);
  CHECK(reads == 100);
  const dense_work w = attention_work(m, 1, reads);
  CHECK(w.flops == doctest::Approx(2.0 * 41'943'040 + 16384.0 * 100));
  CHECK(w.read == 41'943'040ULL * 2 + 4096ULL * 101);  // weights, 100 entries read and 1 written
  // The non-expert weights: 32 attention blocks, 32 routers, embedding and head = 1.6B
  // parameters, Mixtral's 46.7B total less its 45.1B of experts (Context-Aware GPU-NDP Tab. 1).
  const double params = static_cast<double>(non_expert_weight_bytes(m)) / 2.0;
  CHECK(params == doctest::Approx(1.605e9).epsilon(0.001));
  CHECK(kv_bytes_per_token(m) == 32ULL * 4096);
}

TEST_CASE("DeepSeek-V3's latent attention: 187M weights a layer, 576 cached elements a token") {
  const model_shape m = models::deepseek_v3();
  const std::uint64_t q = 7168ULL * 1536 + 1536ULL * 128 * 192;
  const std::uint64_t kv = 7168ULL * (512 + 64) + 512ULL * 128 * (128 + 128);
  const std::uint64_t o = 128ULL * 128 * 7168;
  CHECK(m.attention.weights(m.hidden_size) == q + kv + o);
  CHECK(m.attention.weights(m.hidden_size) == 187'105'280ULL);
  CHECK(m.attention.kv_elements_per_token() == 576);
  CHECK(m.attention.flops_per_cached_token() == 2.0 * 128 * (2 * 512 + 64));
  // Three dense layers of 3 x 7168 x 18432.
  const dense_work ffn = dense_ffn_work(m, 4);
  CHECK(ffn.flops == doctest::Approx(2.0 * 4 * 3 * 7168.0 * 18432));
}

TEST_CASE("prefill reads the cache causally") {
  CHECK(prefill_cached_reads(4) == 1 + 2 + 3 + 4);
  CHECK(prefill_cached_reads(3, 10) == 11 + 12 + 13);
  CHECK(prefill_cached_reads(0, 10) == 0);
}

TEST_CASE("router and output head, and nothing for no tokens") {
  const model_shape m = models::mixtral_8x7b();
  CHECK(router_work(m, 2).flops == doctest::Approx(2.0 * 2 * 4096 * 8));
  CHECK(router_work(m, 2).read == 4096ULL * 8 * 2);
  CHECK(output_head_work(m, 1).read == 32000ULL * 4096 * 2);
  CHECK(attention_work(m, 0, 0) == dense_work{});
  CHECK(dense_ffn_work(m, 5) == dense_work{});  // no dense layers
}

TEST_CASE("a shape without attention cannot be priced, and the error says which") {
  model_shape m = models::mixtral_8x7b();
  m.attention = {};
  CHECK_THROWS_WITH_AS(static_cast<void>(attention_work(m, 1, 1)),
                       "moepolicy::attention_work: the model shape \"Mixtral-8x7B\" does not describe its attention, "
                       "vocabulary or dense FFN (attention.num_heads), got 0",
                       invalid_argument);
}

TEST_CASE("dense work on the roofline: decode attention streams its weights from HBM") {
  const model_shape m = models::mixtral_8x7b();
  const roofline_cost gpu{presets::h100_sxm_gen4(), m};
  const dense_work w = attention_work(m, 1, 100);
  CHECK(gpu.dense_seconds(w.flops, w.read) == doctest::Approx(static_cast<double>(w.read) / 3.35e12));
  CHECK(gpu.dense_seconds(0.0, 0) == 0.0);
  CHECK(gpu.dense_seconds(989.4e12, 0) == doctest::Approx(1.0));
}

TEST_CASE("forward_pass_cost prices each piece on its device") {
  const model_shape m = models::deepseek_v3();
  const roofline_cost gpu{presets::h100_pcie_gen5(), m};
  const forward_pass_cost<roofline_cost> pass{gpu, m};
  const dense_work a = attention_work(m, 8, 8000);
  CHECK(pass.attention_seconds(8, 8000) == doctest::Approx(gpu.dense_seconds(a.flops, a.read)));
  const dense_work r = router_work(m, 8);
  CHECK(pass.router_seconds(8) == doctest::Approx(gpu.dense_seconds(r.flops, r.read)));
  // One shared expert of 3 x 7168 x 2048 weights, run on all eight tokens: memory-bound.
  CHECK(pass.shared_experts_seconds(0, 8) == doctest::Approx(gpu.compute_seconds({0, 256}, fp16, 8)));
  CHECK(pass.shared_experts_seconds(0, 8) == doctest::Approx(3.0 * 7168 * 2048 * 2 / 2.04e12));
  const dense_work f = dense_ffn_work(m, 8);
  CHECK(pass.dense_layer_seconds(8, 8000) ==
        doctest::Approx(gpu.dense_seconds(a.flops, a.read) + gpu.dense_seconds(f.flops, f.read)));
  const dense_work h = output_head_work(m, 8);
  CHECK(pass.output_head_seconds(8) == doctest::Approx(gpu.dense_seconds(h.flops, h.read)));
  CHECK(pass.attention_seconds(0, 0) == 0.0);
}

TEST_CASE("Kimi-Linear's KDA layers: weights once, each sequence's fixed state read and written once") {
  const model_shape m = models::kimi_linear_48b_a3b();
  // Recurrent state 32 x 128 x 128 FP32 = 2 MiB, convolution state 3 x 3 x 4096 BF16.
  CHECK(linear_state_bytes(m) == 524'288ULL * 4 + 36'864ULL * 2);
  CHECK(linear_state_bytes(m, {.recurrent_state_element_bytes = 2.0}) == 524'288ULL * 2 + 36'864ULL * 2);
  // One decode token: 2 FLOPs a weight and 7 x 32 x 128² for the recurrence; BF16 weights,
  // the state read and written back.
  const dense_work one = linear_attention_work(m, 1, 1);
  CHECK(one.flops == doctest::Approx(2.0 * 39'510'016 + 3'670'016.0));
  CHECK(one.read == 39'510'016ULL * 2 + 2 * 2'170'880ULL);
  // Four sequences of one token each: four states, whatever their contexts.
  const dense_work four = linear_attention_work(m, 4, 4);
  CHECK(four.flops == doctest::Approx(4.0 * (2.0 * 39'510'016 + 3'670'016.0)));
  CHECK(four.read == 39'510'016ULL * 2 + 8 * 2'170'880ULL);
  // A prefill of 100 tokens of one sequence: 100 tokens of arithmetic, one state.
  CHECK(linear_attention_work(m, 100, 1).read == one.read);
  CHECK(linear_attention_work(m, 0, 0) == dense_work{});
  // Per layer: layer 0 (dense) and 25 are KDA, 3 and 26 latent attention reading their cache.
  CHECK(attention_work(m, 0, 1, 100, 1) == one);
  CHECK(attention_work(m, 25, 1, 100, 1) == one);
  CHECK(attention_work(m, 3, 1, 100, 1) == attention_work(m, 1, 100));
  CHECK(attention_work(m, 26, 1, 100, 1).read == 29'114'368ULL * 2 + 576ULL * 2 * 101);
  // The KV cache lives in the 7 latent layers only; the state in the 20 KDA layers.
  CHECK(kv_bytes_per_token(m) == 7ULL * 576 * 2);
  CHECK(linear_state_bytes_per_sequence(m) == 20ULL * 2'170'880);
  CHECK(linear_state_bytes_per_sequence(models::mixtral_8x7b()) == 0);
  // Non-expert weights: 7 latent and 20 KDA blocks, the dense FFN, 26 routers, embedding and
  // head (not tied) in BF16, and 26 shared experts.
  const std::uint64_t w =
      7ULL * 29'114'368 + 20ULL * 39'510'016 + 3ULL * 2304 * 9216 + 26ULL * 2304 * 256 + 2ULL * 163840 * 2304;
  CHECK(non_expert_weight_bytes(m) == 2 * w + 26 * expert_bytes(m, fp16));
}

TEST_CASE("linear-attention pricing rejects what it cannot price, naming the value") {
  const model_shape k = models::kimi_linear_48b_a3b();
  CHECK_THROWS_WITH_AS(static_cast<void>(linear_attention_work(k, 2, 3)),
                       "moepolicy::linear_attention_work: sequences must be in [1, tokens = 2], got 3",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(linear_attention_work(k, 2, 0)),
                       "moepolicy::linear_attention_work: sequences must be in [1, tokens = 2], got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(linear_attention_work(models::mixtral_8x7b(), 1, 1)),
                       "moepolicy::linear_attention_work: the model shape \"Mixtral-8x7B\" has no linear attention "
                       "(linear_attention.num_heads), got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(attention_work(k, 27, 1, 1, 1)),
                       "moepolicy::attention_work: layer must be < num_layers = 27, got 27", invalid_argument);
}

TEST_CASE("forward_pass_cost prices each layer by its kind, and models without linear layers as before") {
  const model_shape k = models::kimi_linear_48b_a3b();
  const roofline_cost gpu{presets::h100_sxm_gen4(), k};
  const forward_pass_cost<roofline_cost> pass{gpu, k};
  const dense_work lin = linear_attention_work(k, 4, 4);
  CHECK(pass.attention_seconds(1, 4, 400, 4) == doctest::Approx(gpu.dense_seconds(lin.flops, lin.read)));
  // Memory-bound at batch 4: the weights and eight state passes over HBM.
  CHECK(pass.attention_seconds(1, 4, 400, 4) == doctest::Approx(static_cast<double>(lin.read) / 3.35e12));
  CHECK(pass.attention_seconds(3, 4, 400, 4) == doctest::Approx(pass.attention_seconds(4, 400)));
  const dense_work f = dense_ffn_work(k, 4);
  CHECK(pass.dense_layer_seconds(0, 4, 400, 4) ==
        doctest::Approx(gpu.dense_seconds(lin.flops, lin.read) + gpu.dense_seconds(f.flops, f.read)));
  CHECK(pass.attention_seconds(1, 0, 0, 0) == 0.0);

  const model_shape v3 = models::deepseek_v3();
  const forward_pass_cost<roofline_cost> dense{roofline_cost{presets::h100_pcie_gen5(), v3}, v3};
  for (std::uint32_t layer : {0U, 3U, 60U}) {
    CHECK(dense.attention_seconds(layer, 8, 8000, 8) == dense.attention_seconds(8, 8000));
    CHECK(dense.dense_layer_seconds(layer, 8, 8000, 8) == dense.dense_layer_seconds(8, 8000));
  }
}
