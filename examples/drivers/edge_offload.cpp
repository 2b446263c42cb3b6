// The edge_offload driver's replay — the importance-driven expert scheduler of seed 004 ("Enabling MoE on the
// Edge via Importance-Driven Expert Scheduling", §4.2, §5.1–5.4) against its baselines, on
// recorded decode routing, priced on the paper's three edge settings (Tab. 1).
//
// What is simulated (decode only, §2.1's TPOT):
//   * Batch B: B concurrent decode streams. The trace's decode steps, in trace order across
//     requests, are cut into B contiguous chunks of n = floor(N / B) steps (the last N mod B
//     steps are left out); batched step i runs step i of every chunk, one token per stream,
//     layer by layer. A chunk crossing a request boundary is a stream whose next request
//     starts when its previous one ends (continuous batching). B = 1 is the trace as
//     recorded. Nothing resets between requests: an edge device keeps its cache.
//   * Per layer l of a batched step: the systems route (only ours changes the routing), look
//     up the distinct experts the tokens selected, and run them:
//       t_layer = t_dense + t_gpu(resident) + max(t_load(loaded) + t_gpu(loaded), t_cpu(on CPU))
//     t_dense is the non-expert weights streamed once per step at GPU memory bandwidth,
//     spread evenly over the layers; t_gpu and t_cpu are the roofline times
//     (cost/roofline.hpp) of each expert on its tokens; t_load is PCIe transfer of its
//     FP16/BF16 weights. Loads and CPU work overlap (§5.4: the layer waits for
//     max(T_load, T_CPU)); a loaded expert is computed on the GPU after its load. GPU
//     compute of resident experts is not overlapped with the missing ones (conservative,
//     and the same for every system). TPOT = time per batched step (each stream gets one
//     token per step). The CPU's activation round trip (2 × hidden × 2 bytes per token) is
//     left out: below a microsecond here.
//   * Prefetch (ours): after layer l, the predictor scores layer l+1 and the load queue
//     (predict/prefetch_queue.hpp, depth top-k as §5.2 says) is loaded best first into the
//     link's idle time of layer l, t_layer − t_load (§5.2: prefetch overlaps computation
//     and never delays the current layer's loads); what does not fit is dropped when the
//     queue is cleared. Prefetched bytes count as bytes over PCIe.
//   * Hit ratio: demand accesses are the distinct (layer, expert) pairs of each batched
//     layer after routing; a hit is one resident when the router's output arrives
//     (prefetched ones count). Belady (MIN with bypass, cache/belady.hpp) on the unrouted
//     accesses at the same capacity is the bound of demand caching; a prefetching system
//     can pass it.
//   * Caches start empty, hold experts of every layer in one shared pool of C experts
//     (capacity_scope::shared) and, where a system computes a missing expert on the CPU,
//     do not admit it (its weights never reach the GPU).
//
// Systems (minimal reconstructions, each stated where it is built below):
//   LRU, fetch on miss        GPU-centric offloading with an LRU expert cache (Mixtral-
//                             Offloading style): every missing expert is loaded.
//   LFU (MoE-Infinity-like)   activation-aware caching: perfect LFU over activation counts
//                             kept for the whole run; every missing expert is loaded. Its
//                             request-level activation-matrix prefetching is left out.
//   static (llama.cpp-like)   a fixed, layer-contiguous set of C experts (layers 0, 1, … in
//                             order, as offloading whole layers' FFNs does); every other
//                             expert runs on the CPU; nothing moves over PCIe.
//   EMA + split (HybriMoE-like) an EMA-of-gate-weight cache (S ← 0.7·S + 0.3·s per visit of
//                             the layer; HybriMoE's score-based caching, reconstructed
//                             minimally) and the two-ended split: missing experts sorted by
//                             CPU/load time, the PCIe end loads from the front while the CPU
//                             end computes from the back (the two-pointer loop of
//                             balance/two_pointer.hpp); no prefetch, no substitution.
//   ours                      the expert-cache router (Alg. 1, α per Tab. 1 setting as §6.2
//                             runs them: 0.35, 0.3, 0.25; §5.4's batch-shared alternatives
//                             at B > 1) + prefetch from the cross-layer transition predictor
//                             + score-aware eviction with the in-layer shield (§5.3, window
//                             8) + the two-pointer CPU-load balancer (Alg. 2, cost form).
//   ours, no prefetch / ours, oracle prefetch   the same without prefetch, and with the
//                             trace's own next batch as the prediction (the bound on what
//                             a predictor can add).
//   ours, best-prefix split   the same with the best prefix of Alg. 2's order instead of the
//                             two-pointer split. Alg. 2 starts with a load (C_load <= C_cpu at
//                             0 = 0), so it loads one expert even when that load costs more
//                             than computing every missing expert on the CPU (Mixtral on
//                             the 4060 Ti's PCIe x8: 22.4 ms against 6.9 ms per expert).
//
// The router needs every expert's score to find β, the (k+1)-th score. The Granite and
// Mixtral traces carry only the top-k gate weights, so on them β = 0 and the router keeps
// every routing: the substitution columns and the α sweep read 0 substitutions and mass
// 1.000 — on these traces "ours" gains nothing from §5.1, only from §5.2–5.4.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "drivers/edge_offload.hpp"

#include "common/model_match.hpp"
#include "common/table.hpp"
#include "moepolicy/balance/two_pointer.hpp"
#include "moepolicy/cache/belady.hpp"
#include "moepolicy/cache/expert_cache.hpp"
#include "moepolicy/cache/lfu.hpp"
#include "moepolicy/cache/lru.hpp"
#include "moepolicy/cache/score_aware.hpp"
#include "moepolicy/cost/device_spec.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/io/read_trace.hpp"
#include "moepolicy/predict/oracle_predictor.hpp"
#include "moepolicy/predict/prefetch_queue.hpp"
#include "moepolicy/predict/transition_predictor.hpp"
#include "moepolicy/route/expert_cache_router.hpp"
#include "moepolicy/sim/cache_replay.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::examples::edge_offload {

namespace fs = std::filesystem;

namespace {

constexpr double gib = 1024.0 * 1024.0 * 1024.0;

// ---------------------------------------------------------------------------------------
// Devices of the paper's Tab. 1, from the vendors' datasheets.
//
// PCIe 4.0: 16 GT/s per lane with 128b/130b coding = 1.969 GB/s per lane and direction:
// x16 = 31.5 GB/s, x8 = 15.75 GB/s (PCI-SIG PCIe 4.0 base specification); 1 µs per transfer,
// the host-path latency cost/presets.hpp assumes. Nominal, not measured, bandwidth.
constexpr double pcie4_lane_bandwidth = 16.0 * giga * 128.0 / 130.0 / 8.0;
constexpr link_spec pcie4(int lanes) { return {lanes * pcie4_lane_bandwidth, 1e-6}; }

struct edge_setting {
  std::string id;
  std::string paper_model;  // Tab. 1's model for the setting (not the one replayed here)
  device_spec gpu;
  int pcie_lanes = 16;
  double alpha = 0.3;  // §6.2: 0.35 in S1, 0.3 in S2, 0.25 in S3
  std::string source;
};

// Tensor-core FP16/BF16 peaks are dense (no 2:4 sparsity) with FP32 accumulation — what a
// PyTorch BF16 matmul gets; GeForce parts run that at half their FP16-accumulate rate.
std::vector<edge_setting> edge_settings() {
  std::vector<edge_setting> out;
  const auto gpu = [](std::string name, double mem_gib, double peak_tflops, double bw_gbs, int lanes) {
    device_spec d;
    d.name = std::move(name);
    d.capacity_bytes = static_cast<bytes>(mem_gib * gib);
    d.compute = {.peak_flops = peak_tflops * tera,
                 .peak_bits = fp16,
                 .bit_scaled_compute = false,
                 .memory_bandwidth = bw_gbs * giga,
                 .launch_seconds = 0.0};
    d.weight_link = pcie4(lanes);
    return d;
  };
  // RTX 3080 Ti: NVIDIA product page — 12 GB GDDR6X, 384-bit at 19 Gbps = 912 GB/s,
  // 80 SMs, boost 1.665 GHz, PCIe 4.0 x16. FP16/BF16 tensor, FP32 accumulate, dense:
  // 80 SMs × 512 FLOP/clk (GA102 whitepaper per-SM rate) × 1.665 GHz = 68.2 TFLOP/s.
  out.push_back({"S1", "deepseek-moe-16b", gpu("RTX 3080 Ti 12GB", 12.0, 68.2, 912.0, 16), 16, 0.35,
                 "NVIDIA RTX 3080 Ti spec page; GA102 whitepaper per-SM tensor rate"});
  // RTX 4060 Ti 16 GB: NVIDIA product page — 16 GB GDDR6, 128-bit at 18 Gbps = 288 GB/s,
  // 34 SMs, boost 2.535 GHz, PCIe 4.0 x8 (the card has an x8 interface). FP16/BF16
  // tensor, FP32 accumulate, dense: 34 × 512 FLOP/clk (Ada whitepaper per-SM rate) ×
  // 2.535 GHz = 44.1 TFLOP/s. (The paper's text says 24GB; Tab. 1 and the product say 16GB.)
  out.push_back({"S2", "XVERSE-MoE-A4.2B", gpu("RTX 4060 Ti 16GB", 16.0, 44.1, 288.0, 8), 8, 0.30,
                 "NVIDIA RTX 4060 Ti spec page; Ada whitepaper per-SM tensor rate"});
  // RTX A6000: NVIDIA datasheet — 48 GB GDDR6, 768 GB/s, PCIe 4.0 x16, tensor 309.7
  // TFLOP/s with sparsity = 154.8 dense (FP16/BF16, FP32 accumulate at full rate).
  out.push_back(
      {"S3", "Qwen2-57B-A14B", gpu("RTX A6000 48GB", 48.0, 154.8, 768.0, 16), 16, 0.25, "NVIDIA RTX A6000 datasheet"});
  return out;
}

// Six cores of an AMD Ryzen 9 5900X (Zen 3, AMD product page: base 3.7 GHz, DDR4-3200
// dual channel). Zen 3 has two 256-bit FMA pipes = 32 FP32 FLOP/clk/core and no BF16/FP16
// FMA, so BF16 weights are widened and run at the FP32 peak: 6 × 32 × 3.7 GHz = 710.4
// GFLOP/s. Memory: 2 channels × 8 B × 3200 MT/s = 51.2 GB/s, assumed reachable by 6 cores.
// The weights are already in host memory (no weight link).
device_spec desktop_cpu() {
  device_spec d;
  d.name = "6 cores of Ryzen 9 5900X";
  d.capacity_bytes = static_cast<bytes>(128.0 * gib);
  d.compute = {.peak_flops = 6.0 * 32.0 * 3.7 * giga,
               .peak_bits = fp16,
               .bit_scaled_compute = false,
               .memory_bandwidth = 51.2 * giga,
               .launch_seconds = 0.0};
  d.activation_link = pcie4(16);
  return d;
}

// ---------------------------------------------------------------------------------------
// Non-expert weights, from each model's published configuration (BF16, 2 bytes each).
//   resident: everything but the routed experts (kept on the GPU, §4.1);
//   step_read: what one decode step streams (the embedding table is a row lookup; a tied
//              table is read whole as the LM head).
struct non_expert_figures {
  std::string model;
  std::uint64_t resident_params = 0;
  std::uint64_t step_read_params = 0;
  std::string derivation;
};

std::optional<non_expert_figures> non_expert_for(const model_shape& m) {
  if (m.name == "Granite-3.1-1B-A400M") {
    // 24 layers × attention (q, o: 1024²; k, v: 1024×512 with 8 KV heads of 64) = 75.50M,
    // routers 24 × 1024×32 = 0.79M, norms 0.05M, tied embedding 49155×1024 = 50.33M.
    const std::uint64_t attn = 24ull * (2ull * 1024 * 1024 + 2ull * 1024 * 512);
    const std::uint64_t other = 24ull * 1024 * 32 + (2ull * 24 + 1) * 1024;
    const std::uint64_t embed = 49155ull * 1024;
    return non_expert_figures{m.name, attn + other + embed, attn + other + embed,
                              "attention 75.5M + routers/norms 0.8M + tied embedding 50.3M params"};
  }
  if (m.name == "Mixtral-8x7B") {
    // 32 layers × attention (q, o: 4096²; k, v: 4096×1024 with 8 KV heads of 128) = 1342.2M,
    // routers 32 × 4096×8 = 1.05M, norms 0.27M, embedding and LM head 32000×4096 each.
    const std::uint64_t attn = 32ull * (2ull * 4096 * 4096 + 2ull * 4096 * 1024);
    const std::uint64_t other = 32ull * 4096 * 8 + (2ull * 32 + 1) * 4096;
    const std::uint64_t table = 32000ull * 4096;
    return non_expert_figures{m.name, attn + other + 2 * table, attn + other + table,
                              "attention 1342.2M + routers/norms 1.3M + embedding 131.1M + LM head 131.1M params"};
  }
  return std::nullopt;
}

// CUDA context, allocator slack, activations and the KV cache of 3 streams: 2 GiB kept off
// the expert cache on every GPU (an assumption; the paper gives no figure).
constexpr double runtime_reserve_bytes = 2.0 * gib;

// ---------------------------------------------------------------------------------------
// B concurrent decode streams (see the header comment).
routing_trace interleave(const routing_trace& t, std::uint32_t streams) {
  std::vector<step_ref> decode;
  for (const step_ref& s : t.steps()) {
    if (s.kind == phase::decode) decode.push_back(s);
  }
  const std::size_t n = decode.size() / streams;
  routing_trace_builder b(t.info());
  b.add_request(std::to_string(streams) + " interleaved decode streams");
  for (std::size_t i = 0; i < n; ++i) {
    for (std::uint32_t s = 0; s < streams; ++s) {
      for (const batch_ref& ref : t.batches_of(decode[s * n + i])) {
        for (std::uint32_t j = 0; j < ref.num_rows; ++j) {
          const std::size_t r = ref.first_row + j;
          // Position = stream × 2^16 + row: unique in a (step, layer) and equal across the
          // layers of a stream's token, so the transition predictor pairs them.
          b.add(trace_row{.request = 0,
                          .kind = phase::decode,
                          .step = static_cast<std::uint32_t>(i + 1),
                          .position = s * 65536u + j,
                          .layer = ref.layer,
                          .experts = t.experts(r),
                          .weights = t.weights(r),
                          .scores = t.scores(r)});
        }
      }
    }
  }
  return std::move(b).finish();
}

// ---------------------------------------------------------------------------------------
// HybriMoE-like eviction: the resident expert with the lowest exponential moving average of
// its gate weight, updated each time its layer is routed (S ← keep·S + (1 − keep)·s, s =
// the expert's mean gate weight over the batch's tokens, 0 when unselected). Experts of the
// layer in progress are never evicted. Ties: least recently used, then lower key. Models
// `EvictionPolicy`; `victim` scans the pool (at most 768 experts here).
struct ema_score_config {
  double keep = 0.7;
};

class ema_score_policy {
 public:
  using config_type = ema_score_config;

  ema_score_policy(const cache_shape& shape, const ema_score_config& cfg)
      : shape_(shape),
        keep_(cfg.keep),
        score_(shape.slots(), 0.0),
        last_(shape.slots(), 0),
        resident_(shape.slots(), 0),
        in_use_(shape.slots(), 0),
        batch_(shape.num_experts, 0.0) {}

  void on_insert(expert_key k, const access_info&) noexcept {
    resident_[shape_.flat(k)] = 1;
    last_[shape_.flat(k)] = ++clock_;
  }
  void on_hit(expert_key k, const access_info&) noexcept { last_[shape_.flat(k)] = ++clock_; }
  void on_evict(expert_key k) noexcept { resident_[shape_.flat(k)] = 0; }
  void on_layer_begin(const batch_view& b) noexcept {
    const std::size_t base = static_cast<std::size_t>(b.ref.layer) * shape_.num_experts;
    std::fill(batch_.begin(), batch_.end(), 0.0);
    for (std::size_t i = 0; i < b.experts.size(); ++i) batch_[b.experts[i]] += static_cast<double>(b.weights[i]);
    const double tokens = static_cast<double>(std::max<std::size_t>(b.tokens(), 1));
    for (std::size_t e = 0; e < shape_.num_experts; ++e) {
      score_[base + e] = keep_ * score_[base + e] + (1.0 - keep_) * batch_[e] / tokens;
    }
    for (expert_id e : b.experts) in_use_[base + e] = 1;
  }
  void on_layer_end(layer_id l) noexcept {
    const std::size_t base = static_cast<std::size_t>(l) * shape_.num_experts;
    std::fill(in_use_.begin() + static_cast<std::ptrdiff_t>(base),
              in_use_.begin() + static_cast<std::ptrdiff_t>(base + shape_.num_experts), std::uint8_t{0});
  }
  [[nodiscard]] std::optional<expert_key> victim(std::size_t part) const noexcept {
    std::optional<std::size_t> best;
    for (std::size_t f = 0; f < shape_.slots(); ++f) {
      if (resident_[f] == 0 || in_use_[f] != 0 || shape_.partition_of(shape_.key(f)) != part) continue;
      if (!best || score_[f] < score_[*best] || (score_[f] == score_[*best] && last_[f] < last_[*best])) best = f;
    }
    if (!best) return std::nullopt;
    return shape_.key(*best);
  }

 private:
  cache_shape shape_;
  double keep_;
  std::uint64_t clock_ = 0;
  std::vector<double> score_;
  std::vector<std::uint64_t> last_;
  std::vector<std::uint8_t> resident_;
  std::vector<std::uint8_t> in_use_;
  std::vector<double> batch_;
};

static_assert(EvictionPolicy<ema_score_policy>);
static_assert(policy_traits<ema_score_policy>::observes_layers);

// A predictor that never predicts: systems without prefetch.
struct no_prefetch {
  bool predict(layer_id, std::span<float> out) noexcept {
    std::fill(out.begin(), out.end(), 0.0f);
    return false;
  }
  void observe(const batch_view&) noexcept {}
  void end_step() noexcept {}
  void begin_request() noexcept {}
};
static_assert(PrefetchPredictor<no_prefetch>);

// ---------------------------------------------------------------------------------------
// The replay.

/// What happens to the experts of a layer that are not on the GPU.
/// `balance` is Alg. 2's two-pointer split; `best_prefix` the best split among the prefixes of
/// the same order (`cost_balancer::balance_best_prefix`), never worse.
enum class miss_rule : std::uint8_t { load_all, cpu_all, balance, best_prefix };

struct run_config {
  miss_rule misses = miss_rule::load_all;
  bool route = false;
  double alpha = 0.3;
};

struct run_stats {
  std::uint64_t steps = 0;
  std::uint64_t accesses = 0;
  std::uint64_t hits = 0;
  double seconds = 0.0;
  double cpu_seconds = 0.0;
  double pcie_bytes = 0.0;  // demand loads + prefetches
  double prefetch_bytes = 0.0;
  std::uint64_t substituted = 0;
  double original_mass = 0.0;
  double routed_mass = 0.0;
  bool routed = false;

  [[nodiscard]] double tpot() const { return steps == 0 ? 0.0 : seconds / static_cast<double>(steps); }
  [[nodiscard]] double hit_ratio() const {
    return accesses == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(accesses);
  }
};

struct edge_costs {
  roofline_cost gpu;
  roofline_cost cpu;
  double dense_seconds_per_layer = 0.0;
  bytes expert_bytes = 0;
};

/// The distinct experts of `b` in order of first selection, with their token counts.
struct layer_work {
  std::vector<expert_id> order;
  std::vector<std::uint32_t> tokens;
  explicit layer_work(std::size_t E) : tokens(E, 0) {}
  void load(const batch_view& b) {
    for (expert_id e : order) tokens[e] = 0;
    order.clear();
    for (expert_id e : b.experts) {
      if (tokens[e]++ == 0) order.push_back(e);
    }
  }
};

template <class Policy, class Predictor>
run_stats simulate(const routing_trace& t, const edge_costs& c, std::uint64_t capacity,
                   const typename Policy::config_type& pc, const run_config& rc, Predictor& predictor) {
  const trace_info& info = t.info();
  const std::size_t E = info.num_experts;
  expert_cache<Policy> cache(cache_config{.num_layers = info.num_layers,
                                          .num_experts = info.num_experts,
                                          .capacity = capacity,
                                          .unit = capacity_unit::experts,
                                          .scope = capacity_scope::shared,
                                          .expert_bytes = c.expert_bytes},
                             pc);
  std::optional<expert_cache_router> router;
  if (rc.route) {
    router.emplace(router_config{
        .num_experts = info.num_experts, .top_k = info.top_k, .alpha = rc.alpha, .prefer_batch_shared = true});
  }
  cost_balancer<roofline_cost, roofline_cost> balancer(c.gpu, c.cpu, E);
  prefetch_queue queue(E);
  std::vector<float> predicted(E, 0.0f);
  std::vector<expert_id> ids;
  std::vector<float> weights;
  std::vector<balance_item> missing;
  std::vector<balance_side> sides;
  layer_work work(E);
  const double load_one = c.gpu.transfer_seconds(c.expert_bytes);

  run_stats out;
  out.routed = rc.route;
  predictor.begin_request();
  for (const step_ref& s : t.steps()) {
    for (const batch_ref& ref : t.batches_of(s)) {
      const batch_view b = t.view(ref);
      const layer_id l = ref.layer;
      batch_view routed = b;
      if (router) {
        ids.resize(b.experts.size());
        weights.resize(b.weights.size());
        const route_result r = router->route(
            b,
            [&](expert_id e) {
              return cache.contains(expert_key{l, e});
            },
            ids, weights);
        out.substituted += r.substituted;
        out.original_mass += r.original_mass;
        out.routed_mass += r.routed_mass;
        routed.experts = ids;
        routed.weights = weights;
      }
      cache.begin_layer(routed);
      work.load(routed);

      double t_gpu = 0.0, t_load = 0.0, t_gpu_loaded = 0.0, t_cpu = 0.0;
      missing.clear();
      for (expert_id e : work.order) {
        const expert_key k{l, e};
        ++out.accesses;
        if (cache.contains(k)) {
          ++out.hits;
          static_cast<void>(cache.get(k));
          t_gpu += c.gpu.compute_seconds(k, fp16, work.tokens[e]);
        } else {
          missing.push_back({k, work.tokens[e], fp16});
        }
      }
      const auto load = [&](const balance_item& it) {
        static_cast<void>(cache.get(it.key));
        t_load += load_one;
        t_gpu_loaded += c.gpu.compute_seconds(it.key, fp16, it.tokens);
        out.pcie_bytes += static_cast<double>(c.expert_bytes);
      };
      const auto on_cpu = [&](const balance_item& it) { t_cpu += c.cpu.compute_seconds(it.key, fp16, it.tokens); };
      switch (rc.misses) {
        case miss_rule::load_all:
          for (const auto& it : missing) load(it);
          break;
        case miss_rule::cpu_all:
          for (const auto& it : missing) on_cpu(it);
          break;
        case miss_rule::balance:
        case miss_rule::best_prefix:
          sides.resize(missing.size());
          if (rc.misses == miss_rule::balance) {
            static_cast<void>(balancer.balance(missing, sides));
          } else {
            static_cast<void>(balancer.balance_best_prefix(missing, sides));
          }
          for (std::size_t i = 0; i < missing.size(); ++i) {
            if (sides[i] == balance_side::load)
              load(missing[i]);
            else
              on_cpu(missing[i]);
          }
          break;
      }
      const double t_layer = c.dense_seconds_per_layer + t_gpu + std::max(t_load + t_gpu_loaded, t_cpu);
      out.seconds += t_layer;
      out.cpu_seconds += t_cpu;
      cache.end_layer(l);
      predictor.observe(b);

      // Prefetch layer l+1 into the link's idle time of this layer (§5.2).
      const auto next = static_cast<layer_id>(l + 1);
      if (next < info.num_layers && predictor.predict(next, predicted)) {
        queue.plan(next, predicted, info.top_k);
        for (const queued_expert& q : queue.pending()) {
          if (cache.contains(q.key)) static_cast<void>(cache.prefetch(q.key, q.score));
        }
        const double budget = t_layer - t_load;
        double used = 0.0;
        while (const auto q = queue.pop()) {
          if (cache.contains(q->key)) continue;
          if (used + load_one > budget) break;
          if (cache.prefetch(q->key, q->score) != prefetch_outcome::inserted) continue;
          used += load_one;
          out.pcie_bytes += static_cast<double>(c.expert_bytes);
          out.prefetch_bytes += static_cast<double>(c.expert_bytes);
        }
        queue.clear();
      }
    }
    cache.end_step();
    predictor.end_step();
    ++out.steps;
  }
  return out;
}

/// llama.cpp-like static placement: experts 0 … C−1 in layer-major order live on the GPU;
/// every other expert runs on the CPU.
run_stats simulate_static(const routing_trace& t, const edge_costs& c, std::uint64_t capacity) {
  const trace_info& info = t.info();
  const std::uint64_t on_gpu = std::min<std::uint64_t>(capacity, std::uint64_t{info.num_layers} * info.num_experts);
  layer_work work(info.num_experts);
  run_stats out;
  for (const step_ref& s : t.steps()) {
    for (const batch_ref& ref : t.batches_of(s)) {
      work.load(t.view(ref));
      double t_gpu = 0.0, t_cpu = 0.0;
      for (expert_id e : work.order) {
        const expert_key k{ref.layer, e};
        ++out.accesses;
        if (k.flat(info.num_experts) < on_gpu) {
          ++out.hits;
          t_gpu += c.gpu.compute_seconds(k, fp16, work.tokens[e]);
        } else {
          t_cpu += c.cpu.compute_seconds(k, fp16, work.tokens[e]);
        }
      }
      out.seconds += c.dense_seconds_per_layer + t_gpu + t_cpu;
      out.cpu_seconds += t_cpu;
    }
    ++out.steps;
  }
  return out;
}

double belady_hit_ratio(const routing_trace& t, std::uint64_t capacity) {
  const auto r = replay_cache<belady_policy>(t, cache_config{.num_layers = t.info().num_layers,
                                                             .num_experts = t.info().num_experts,
                                                             .capacity = capacity,
                                                             .unit = capacity_unit::experts,
                                                             .scope = capacity_scope::shared});
  return r.stats.hit_ratio();
}

// ---------------------------------------------------------------------------------------
// Printing.

std::string pct(double x) { return fixed(100.0 * x, 1); }
std::string mb(double b) { return fixed(b / 1e6, 1); }

struct labelled {
  std::string label;
  run_stats stats;
};

void print_table(const std::vector<labelled>& rows, double belady, std::ostream& out) {
  examples::text_table tt({"system", "TPOT ms", "vs LRU", "hit %", "PCIe MB/step", "prefetch MB/step", "CPU ms/step",
                           "subst", "mass kept"});
  const double lru = rows.front().stats.tpot();
  for (const auto& r : rows) {
    const auto& s = r.stats;
    const double steps = static_cast<double>(std::max<std::uint64_t>(s.steps, 1));
    tt.add({r.label, fixed(s.tpot() * 1e3, 2), fixed(lru / s.tpot(), 2) + "x", pct(s.hit_ratio()),
            mb(s.pcie_bytes / steps), mb(s.prefetch_bytes / steps), fixed(s.cpu_seconds / steps * 1e3, 2),
            s.routed ? std::to_string(s.substituted) : "-",
            s.routed ? fixed(s.original_mass > 0.0 ? s.routed_mass / s.original_mass : 1.0, 3) : "-"});
  }
  tt.add({"Belady (demand bound)", "-", "-", pct(belady), "-", "-", "-", "-", "-"});
  tt.print(out, "    ");
}

struct sweep_point {
  double alpha;
  std::vector<run_stats> per_setting;
};

// The settings a run uses: the paper's three, or one built from the options' GPU.
std::vector<edge_setting> settings_for(const options& opt) {
  if (!opt.gpu) return edge_settings();
  return {{"M", "-", *opt.gpu, 16, 0.3, "--machine"}};
}

device_spec cpu_for(const options& opt) { return opt.cpu ? *opt.cpu : desktop_cpu(); }

}  // namespace

void run(const fs::path& path, const options& opt, std::ostream& out) {
  const std::vector<std::uint32_t>& batches = opt.batches;
  const std::vector<double>& alphas = opt.alphas;
  const std::vector<double>& fractions = opt.fractions;
  const routing_trace trace = io::read_trace(path);
  const auto shape = examples::preset_for(trace.info());
  if (!shape) throw std::runtime_error(path.string() + ": no model preset matches this trace's model");
  const auto dense = non_expert_for(*shape);
  if (!dense) throw std::runtime_error(shape->name + ": no non-expert weight figures for this model");
  const auto settings = settings_for(opt);
  const device_spec cpu_spec = cpu_for(opt);
  const bytes eb = expert_bytes(*shape, fp16);
  const std::uint64_t all = std::uint64_t{trace.info().num_layers} * trace.info().num_experts;
  const double resident_bytes = 2.0 * static_cast<double>(dense->resident_params);
  const double step_bytes = 2.0 * static_cast<double>(dense->step_read_params);

  std::size_t decode_steps = 0;
  for (const step_ref& s : trace.steps()) decode_steps += s.kind == phase::decode ? 1 : 0;

  out << "trace: " << path.filename().string() << "\n  model " << shape->name << ": " << trace.info().num_layers
      << " MoE layers x " << trace.info().num_experts << " experts, top-" << trace.info().top_k << ", "
      << trace.requests().size() << " request(s), " << decode_steps << " decode steps; router scores: "
      << (trace.info().has_scores ? "full" : "top-k gate weights only (the router substitutes nothing)") << '\n'
      << "  expert: 3 x " << shape->hidden_size << " x " << shape->expert_intermediate_size
      << " BF16 = " << mb(static_cast<double>(eb)) << " MB; non-expert weights " << mb(resident_bytes) << " MB ("
      << dense->derivation << "), " << mb(step_bytes) << " MB read per decode step; runtime reserve "
      << fixed(runtime_reserve_bytes / gib, 1) << " GiB\n";

  std::vector<edge_costs> costs;
  std::vector<std::uint64_t> device_capacity;
  for (const auto& s : settings) {
    const double free_bytes = static_cast<double>(s.gpu.capacity_bytes) - resident_bytes - runtime_reserve_bytes;
    const auto cap = static_cast<std::uint64_t>(std::max(0.0, std::floor(free_bytes / static_cast<double>(eb))));
    device_capacity.push_back(std::min(cap, all));
    const double dense_s = step_bytes / s.gpu.compute.memory_bandwidth;
    costs.push_back(edge_costs{roofline_cost{s.gpu, *shape}, roofline_cost{cpu_spec, *shape},
                               dense_s / trace.info().num_layers, eb});
    out << "  " << s.id << ": " << s.gpu.name << ", room for " << cap << " experts (" << device_capacity.back()
        << " of " << all << " cached, " << pct(static_cast<double>(device_capacity.back()) / static_cast<double>(all))
        << "%); load " << fixed(costs.back().gpu.transfer_seconds(eb) * 1e3, 3) << " ms, GPU "
        << fixed(costs.back().gpu.compute_seconds({0, 0}, fp16, 1) * 1e3, 3) << " ms, CPU "
        << fixed(costs.back().cpu.compute_seconds({0, 0}, fp16, 1) * 1e3, 3) << " ms per expert-token; dense "
        << fixed(dense_s * 1e3, 3) << " ms/step\n";
  }

  // Capacities: the device-derived one; when the whole model fits, fractions of the experts
  // instead (a cache of every expert only ever misses an expert's first use).
  const bool fits = std::all_of(device_capacity.begin(), device_capacity.end(), [&](auto c) { return c >= all; });
  struct cap_case {
    std::string label;
    std::vector<std::uint64_t> per_setting;
  };
  std::vector<cap_case> caps;
  if (fits) {
    const routing_trace one = interleave(trace, 1);
    const double compulsory = belady_hit_ratio(one, all);
    out << "  the whole model fits every setting: a cache of all " << all
        << " experts misses only first uses (hit ratio " << pct(compulsory)
        << "% at batch 1, every system alike),\n  so the comparison caches fractions of the experts:";
    for (double f : fractions) {
      const auto c = static_cast<std::uint64_t>(std::llround(f * static_cast<double>(all)));
      out << ' ' << pct(f) << "% = " << c;
      caps.push_back(
          {pct(f) + "% of experts (" + std::to_string(c) + ")", std::vector<std::uint64_t>(settings.size(), c)});
    }
    out << '\n';
  } else {
    caps.push_back({"device-derived capacity", device_capacity});
  }

  for (const auto& cap : caps) {
    std::vector<std::vector<sweep_point>> sweeps;  // per batch
    for (std::uint32_t B : batches) {
      const routing_trace t = interleave(trace, B);
      std::vector<sweep_point> sweep;
      for (double a : alphas) sweep.push_back({a, {}});
      for (std::size_t si = 0; si < settings.size(); ++si) {
        const auto& set = settings[si];
        const edge_costs& c = costs[si];
        const std::uint64_t C = cap.per_setting[si];
        no_prefetch none;
        transition_config tc{.num_layers = t.info().num_layers,
                             .num_experts = t.info().num_experts,
                             .top_k = t.info().top_k,
                             .max_batch_tokens = 64};
        std::vector<labelled> rows;
        rows.push_back(
            {"LRU, fetch on miss", simulate<lru_policy>(t, c, C, {}, {.misses = miss_rule::load_all}, none)});
        rows.push_back({"LFU (MoE-Infinity-like)",
                        simulate<lfu_policy>(t, c, C, {.decay = 1.0}, {.misses = miss_rule::load_all}, none)});
        rows.push_back({"static (llama.cpp-like)", simulate_static(t, c, C)});
        rows.push_back({"EMA + split (HybriMoE-like)",
                        simulate<ema_score_policy>(t, c, C, {}, {.misses = miss_rule::balance}, none)});
        const run_config ours{.misses = miss_rule::balance, .route = true, .alpha = set.alpha};
        {
          transition_predictor tp(tc);
          rows.push_back({"ours (a=" + fixed(set.alpha, 2) + ")", simulate<score_aware_policy>(t, c, C, {}, ours, tp)});
        }
        rows.push_back({"ours, no prefetch", simulate<score_aware_policy>(t, c, C, {}, ours, none)});
        {
          oracle_predictor op(t, {.horizon = 1});
          rows.push_back({"ours, oracle prefetch", simulate<score_aware_policy>(t, c, C, {}, ours, op)});
        }
        {
          transition_predictor tp(tc);
          run_config rc = ours;
          rc.misses = miss_rule::best_prefix;
          rows.push_back({"ours, best-prefix split", simulate<score_aware_policy>(t, c, C, {}, rc, tp)});
        }
        for (auto& p : sweep) {
          transition_predictor tp(tc);
          run_config rc = ours;
          rc.alpha = p.alpha;
          p.per_setting.push_back(simulate<score_aware_policy>(t, c, C, {}, rc, tp));
        }
        out << "\n  " << set.id << " " << set.gpu.name << " (Tab. 1 pairs it with " << set.paper_model << "), batch "
            << B << " (" << t.steps().size() << " steps), cache " << C << " experts, " << cap.label << ":\n";
        print_table(rows, belady_hit_ratio(t, C), out);
      }
      sweeps.push_back(std::move(sweep));
    }
    out << "\n  alpha sweep of ours (Tab. 3's range), " << cap.label << ": TPOT ms / substitutions / mass kept\n";
    std::vector<std::string> head{"batch", "alpha"};
    for (const auto& s : settings) head.push_back(s.id + " " + s.gpu.name);
    examples::text_table st(head);
    for (std::size_t bi = 0; bi < batches.size(); ++bi) {
      for (const auto& p : sweeps[bi]) {
        std::vector<std::string> row{std::to_string(batches[bi]), fixed(p.alpha, 2)};
        for (const auto& r : p.per_setting) {
          row.push_back(fixed(r.tpot() * 1e3, 2) + " / " + std::to_string(r.substituted) + " / " +
                        fixed(r.original_mass > 0.0 ? r.routed_mass / r.original_mass : 1.0, 3));
        }
        st.add(row);
      }
    }
    st.print(out, "    ");
  }
}

void print_settings(const options& opt, std::ostream& out) {
  const device_spec cpu = cpu_for(opt);
  if (opt.gpu) {
    out << "edge setting: the given GPU and " << (opt.cpu ? "CPU" : "the paper's CPU (6 cores)") << ":\n";
  } else {
    out << "edge settings (seed 004 Tab. 1; 6 CPU cores; PCIe 4.0 at 31.5 GB/s per x16, 1 us per transfer):\n";
  }
  examples::text_table dev({"setting", "GPU", "memory", "BF16 TFLOP/s", "mem GB/s", "PCIe", "alpha", "source"});
  for (const auto& s : settings_for(opt)) {
    dev.add({s.id, s.gpu.name, fixed(static_cast<double>(s.gpu.capacity_bytes) / gib, 0) + " GiB",
             fixed(s.gpu.compute.peak_flops / tera, 1), fixed(s.gpu.compute.memory_bandwidth / giga, 0),
             (opt.gpu ? std::string() : "4.0 x" + std::to_string(s.pcie_lanes) + " ") +
                 fixed(s.gpu.weight_link.bandwidth / giga, 2) + " GB/s",
             fixed(s.alpha, 2), s.source});
  }
  dev.add({"CPU", cpu.name, "host", fixed(cpu.compute.peak_flops / tera, 3),
           fixed(cpu.compute.memory_bandwidth / giga, 1), "-", "-",
           opt.cpu ? "--machine" : "AMD product page: 3.7 GHz base, DDR4-3200 x2; Zen 3 32 FP32 FLOP/clk"});
  dev.print(out, "  ");
  out << "TPOT per layer = dense + GPU(resident) + max(PCIe load + GPU(loaded), CPU); batch B = B decode\n"
         "streams cut from the trace's decode steps and run in lock-step (see the source).\n";
}

}  // namespace moepolicy::examples::edge_offload
