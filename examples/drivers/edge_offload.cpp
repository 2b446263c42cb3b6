// The edge_offload driver's comparison — Edge-MoE's importance-driven expert scheduler and
// its baselines on the timed model (sim/edge_replay.hpp, where the machine, the systems and
// the prefetch rule are stated), on the three edge settings of Edge-MoE Tab. 1 (presets
// rtx_3080_ti, rtx_4060_ti_16gb, rtx_a6000 and ryzen9_5900x_6c in cost/presets.hpp). This
// file chooses the systems and the cache sizes and prints.
//
// Systems, each a minimal reconstruction:
//   LRU, fetch on miss        GPU-centric offloading with an LRU cache (Mixtral-Offloading
//                             style): every missing expert is loaded.
//   LFU (MoE-Infinity-like)   perfect LFU over the whole run; every missing expert loaded. Its
//                             request-level activation-matrix prefetching is left out.
//   static (llama.cpp-like)   a fixed, layer-contiguous set of experts on the GPU (loaded at
//                             startup), every other expert on the CPU; nothing is loaded.
//   EMA + split (HybriMoE-like) the HybriMoE-like cache (cache/ema_score.hpp) and Alg. 2's
//                             two-pointer split; no prefetch, no substitution.
//   ours                      the expert-cache router (Alg. 1, α per setting as §6.2: 0.35,
//                             0.3, 0.25), the one-layer-ahead prefetch from the transition
//                             predictor (§5.2), score-aware eviction with the shield (§5.3)
//                             and the two-pointer split (§5.4).
//   ours, no prefetch / ours, oracle prefetch   without prefetch, and with the trace's own
//                             next batch as the prediction (the bound on what a predictor adds).
//   ours, best-prefix split   the best prefix of Alg. 2's order instead of the two-pointer split.
// The cache holds what the GPU has room for beside the non-expert weights, a 2 GiB runtime
// reserve and the KV cache; when the whole model fits every setting, fractions of the experts.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "drivers/edge_offload.hpp"

#include "common/alongside.hpp"
#include "common/model_match.hpp"
#include "common/next_uses.hpp"
#include "common/table.hpp"
#include "common/trace_input.hpp"
#include "moepolicy/cache/belady.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/sim/cache_replay.hpp"
#include "moepolicy/sim/decode_streams.hpp"
#include "moepolicy/sim/edge_replay.hpp"

namespace moepolicy::examples::edge_offload {

namespace fs = std::filesystem;

namespace {

constexpr double gib = 1024.0 * 1024.0 * 1024.0;
/// CUDA context, allocator slack and activations: kept off the expert cache on every GPU (an
/// assumption; the paper gives no figure). The KV cache is counted apart.
constexpr bytes runtime_reserve = bytes{2} << 30;

struct edge_setting {
  std::string id;
  std::string paper_model;  // Tab. 1's model for the setting (not the one replayed here)
  device_spec gpu;
  double alpha = 0.3;  // §6.2: 0.35 in S1, 0.3 in S2, 0.25 in S3
};

std::vector<edge_setting> settings_for(const options& opt) {
  if (opt.gpu) return {{"M", "-", *opt.gpu, 0.3}};
  return {{"S1", "deepseek-moe-16b", presets::rtx_3080_ti(), 0.35},
          {"S2", "XVERSE-MoE-A4.2B", presets::rtx_4060_ti_16gb(), 0.30},
          {"S3", "Qwen2-57B-A14B", presets::rtx_a6000(), 0.25}};
}

device_spec cpu_for(const options& opt) { return opt.cpu ? *opt.cpu : presets::ryzen9_5900x_6c(); }

std::string pct(double x) { return fixed(100.0 * x, 1); }
std::string mb(double b) { return fixed(b / 1e6, 1); }

std::vector<edge_system_config> systems_for(double alpha) {
  const std::string a = fixed(alpha, 2);
  return {
      {"LRU, fetch on miss", lru_config{}, edge_miss_rule::load_all},
      {"LFU (MoE-Infinity-like)", lfu_config{.decay = 1.0}, edge_miss_rule::load_all},
      {"static (llama.cpp-like)", lru_config{}, edge_miss_rule::cpu_all, false, alpha, edge_predictor::none, true},
      {"EMA + split (HybriMoE-like)", ema_score_config{}, edge_miss_rule::balance},
      {"ours (a=" + a + ")", score_aware_config{}, edge_miss_rule::balance, true, alpha, edge_predictor::transition},
      {"ours, no prefetch", score_aware_config{}, edge_miss_rule::balance, true, alpha, edge_predictor::none},
      {"ours, oracle prefetch", score_aware_config{}, edge_miss_rule::balance, true, alpha, edge_predictor::oracle},
      {"ours, best-prefix split", score_aware_config{}, edge_miss_rule::best_prefix, true, alpha,
       edge_predictor::transition},
  };
}

void print_table(const edge_replay_result& r, double belady, std::ostream& out) {
  text_table t({"system", "TPOT ms", "vs LRU", "hit %", "late", "PCIe MB/step", "prefetch MB/step", "wasted MB/step",
                "CPU ms/step", "subst", "mass kept"});
  const double lru = r.systems.front().tpot();
  for (const auto& s : r.systems) {
    const double steps = static_cast<double>(std::max<std::uint64_t>(s.steps, 1));
    const auto& link = s.accounts[s.to_gpu];
    t.add({s.config.label, fixed(s.tpot() * 1e3, 2), fixed(lru / s.tpot(), 2) + "x",
           s.cache_bypassed() ? "bypassed" : pct(s.hit_ratio()), std::to_string(s.cache.late_prefetches),
           mb(static_cast<double>(link.moved(cost_kind::demand_fetch) + link.moved(cost_kind::prefetch)) / steps),
           mb(static_cast<double>(link.moved(cost_kind::prefetch)) / steps),
           mb(static_cast<double>(s.cache.wasted_bytes) / steps), fixed(s.accounts[s.cpu].busy() / steps * 1e3, 2),
           s.config.route ? std::to_string(s.substituted) : "-", s.config.route ? fixed(s.mass_kept(), 3) : "-"});
  }
  t.add({"Belady (demand bound)", "-", "-", pct(belady), "-", "-", "-", "-", "-", "-", "-"});
  t.print(out, "    ");
}

/// Belady's demand hit ratio on `batched` at each capacity, every cache in one walk sharing
/// one cursor of next uses rebuilt a chunk at a time (`chunked_next_uses`): held whole (8
/// bytes per access, beside the access sequence they are computed from) they set the
/// report's peak at the B = 1 streams. The hit ratios are the same.
std::vector<double> belady_ratios(const routing_trace& batched, const std::vector<std::uint64_t>& capacities) {
  const auto& i = batched.info();
  std::deque<expert_cache<belady_policy>> caches;
  for (std::uint64_t c : capacities) {
    caches.emplace_back(cache_config{.num_layers = i.num_layers, .num_experts = i.num_experts, .capacity = c});
  }
  const next_use_index index = chunked_next_uses(batched);
  static_cast<void>(replay_caches(batched, cache_replay_config{}, index, caches));
  std::vector<double> out;
  for (const auto& c : caches) out.push_back(c.stats().hit_ratio());
  return out;
}

}  // namespace

void run(const fs::path& path, const options& opt, std::ostream& out) {
  run(path, examples::load_trace(path), opt, out);
}

void run(const fs::path& path, const routing_trace& trace, const options& opt, std::ostream& out) {
  const auto shape = examples::preset_for(trace.info());
  if (!shape) throw std::runtime_error(path.string() + ": no model preset matches this trace's model");
  const auto settings = settings_for(opt);
  const device_spec cpu_spec = cpu_for(opt);
  const roofline_cost cpu{cpu_spec, *shape};
  const std::uint32_t L = trace.info().num_layers;
  const bytes eb = expert_bytes(*shape, fp16);
  const std::uint64_t all = std::uint64_t{L} * trace.info().num_experts;
  const bytes non_expert = non_expert_weight_bytes(*shape);

  // The KV cache of the largest batch (and, in a hybrid model, its sequences' linear-attention
  // states), for the room left to experts.
  // The tokens of each batch size's streams are formed here, without their rows, for their
  // KV cache and rows; the streams are formed whole for each capacity case, whose settings
  // and systems replay them: one batch size's streams are held at a time. Those of one
  // stream give the header's requests and steps.
  const auto form = [&](std::size_t B, bool tokens_only = false) {
    const decode_streams_config c{.streams = B, .tokens_only = tokens_only};
    return opt.streams ? opt.streams(c)
                       : std::make_shared<const decode_streams>(make_decode_streams(trace, c, opt.jobs));
  };
  std::uint64_t kv_tokens = 0, max_batch = 1, rows_per_system = 0;
  std::optional<std::pair<std::size_t, std::size_t>> single;  // requests and steps of B = 1
  for (std::uint32_t B : opt.batches) {
    max_batch = std::max<std::uint64_t>(max_batch, B);
    const std::shared_ptr<const decode_streams> d = form(B, true);
    rows_per_system += d->num_rows();
    for (std::size_t s = 0; s < d->num_steps(); ++s) {
      std::uint64_t kv = 0;
      for (const stream_token& tk : d->tokens(s)) kv += tk.context + 1;
      kv_tokens = std::max(kv_tokens, kv);
    }
    if (B == 1) single.emplace(d->sequences().size(), d->num_tokens());
  }
  if (!single) {
    const std::shared_ptr<const decode_streams> one = form(1, true);
    single.emplace(one->sequences().size(), one->num_tokens());
  }
  out << "trace: " << path.filename().string() << "\n  model " << shape->name << ": " << L << " MoE layers x "
      << trace.info().num_experts << " experts, top-" << trace.info().top_k << ", " << single->first << " request(s), "
      << single->second << " decode steps; router scores: "
      << (trace.info().has_scores ? "full" : "top-k gate weights only (the router substitutes nothing)") << '\n'
      << "  expert: 3 x " << shape->hidden_size << " x " << shape->expert_intermediate_size
      << " BF16 = " << mb(static_cast<double>(eb)) << " MB; non-expert weights " << mb(static_cast<double>(non_expert))
      << " MB (attention, routers, embedding and head, from the model shape); runtime reserve "
      << fixed(static_cast<double>(runtime_reserve) / gib, 1) << " GiB; KV cache of the largest batch " << kv_tokens
      << " tokens\n";

  std::vector<std::uint64_t> device_capacity;
  for (const auto& s : settings) {
    const roofline_cost gpu{s.gpu, *shape};
    const std::uint64_t room = experts_that_fit(gpu, *shape, runtime_reserve, kv_tokens, {}, max_batch);
    device_capacity.push_back(std::min(room, all));
    out << "  " << s.id << ": " << s.gpu.name << ", room for " << room << " experts (" << device_capacity.back()
        << " of " << all << " cached, " << pct(static_cast<double>(device_capacity.back()) / static_cast<double>(all))
        << "%); load " << fixed(gpu.transfer_seconds(eb) * 1e3, 3) << " ms, GPU "
        << fixed(gpu.compute_seconds({0, 0}, fp16, 1) * 1e3, 3) << " ms, CPU "
        << fixed(cpu.compute_seconds({0, 0}, fp16, 1) * 1e3, 3) << " ms per expert-token\n";
  }

  struct cap_case {
    std::string label;
    std::vector<std::uint64_t> per_setting;
  };
  std::vector<cap_case> caps;
  if (std::all_of(device_capacity.begin(), device_capacity.end(), [&](auto c) { return c >= all; })) {
    out << "  the whole model fits every setting: a cache of all " << all
        << " experts misses only first uses, so the comparison caches fractions of the experts:";
    for (double f : opt.fractions) {
      const auto c = static_cast<std::uint64_t>(std::llround(f * static_cast<double>(all)));
      out << ' ' << pct(f) << "% = " << c;
      caps.push_back(
          {pct(f) + "% of experts (" + std::to_string(c) + ")", std::vector<std::uint64_t>(settings.size(), c)});
    }
    out << '\n';
  } else {
    caps.push_back({"device-derived capacity", device_capacity});
  }

  if (opt.progress != nullptr) {
    // Per capacity case, batch and setting: the systems, and the alpha sweep's.
    const std::size_t per = systems_for(0.0).size() + (trace.info().has_scores ? opt.alphas.size() : 0);
    opt.progress->plan(caps.size() * settings.size() * per * rows_per_system);
  }
  for (const auto& cap : caps) {
    struct sweep_row {
      std::uint32_t batch;
      double alpha;
      std::vector<edge_system_result> per_setting;
    };
    std::vector<sweep_row> sweep;
    for (std::size_t bi = 0; bi < opt.batches.size(); ++bi) {
      const std::uint32_t B = opt.batches[bi];
      const std::shared_ptr<const decode_streams> d = form(B);
      // Every setting's systems and alpha sweep at this batch size walk the steps in one
      // lockstep sweep: per setting, one point of its systems, then one per alpha.
      std::vector<roofline_cost> gpus;
      std::vector<std::vector<edge_system_config>> system_sets;
      gpus.reserve(settings.size());
      for (std::size_t si = 0; si < settings.size(); ++si) {
        gpus.emplace_back(settings[si].gpu, *shape);
        const std::vector<edge_system_config> systems = systems_for(settings[si].alpha);
        system_sets.push_back(systems);
        if (!trace.info().has_scores) continue;
        for (double a : opt.alphas) {
          std::vector<edge_system_config> one_sys{systems[4]};
          one_sys[0].alpha = a;
          system_sets.push_back(std::move(one_sys));
        }
      }
      std::vector<edge_sweep_point<roofline_cost>> points;
      const std::size_t per_setting = 1 + (trace.info().has_scores ? opt.alphas.size() : 0);
      for (std::size_t p = 0; p < system_sets.size(); ++p) {
        const std::size_t si = p / per_setting;
        points.push_back({&gpus[si], cap.per_setting[si], system_sets[p]});
      }
      // Belady's bound at each setting's capacity, beside the sweep.
      std::vector<edge_replay_result> swept;
      std::vector<double> belady;
      alongside(
          opt.jobs,
          [&] {
            swept = replay_edge_sweep<roofline_cost>(*d, cpu, *shape, points,
                                                     {.streams = B, .progress = opt.progress, .jobs = opt.jobs});
          },
          [&] { belady = belady_ratios(d->batched(), cap.per_setting); });
      for (std::size_t si = 0; si < settings.size(); ++si) {
        const auto& set = settings[si];
        const roofline_cost& gpu = gpus[si];
        const std::uint64_t C = cap.per_setting[si];
        const edge_replay_result& r = swept[si * per_setting];
        out << "\n  " << set.id << " " << set.gpu.name << " (Tab. 1 pairs it with " << set.paper_model << "), batch "
            << B << " (" << r.steps << " steps, " << to_string(r.formation) << "), cache " << C << " experts, "
            << cap.label << ":\n";
        print_table(r, belady[si], out);
        // Where a prefetch can land: the link time per MoE layer that demand work leaves
        // ("ours": everything but its loads and the CPU's results).
        const edge_system_result& ours = r.systems[4];
        const double layers = static_cast<double>(std::max<std::uint64_t>(ours.steps, 1)) * L;
        const auto& link = ours.accounts[ours.to_gpu];
        const double idle =
            (ours.run_seconds - link.busy(cost_kind::demand_fetch) - link.busy(cost_kind::activation)) / layers;
        out << "    link time left by demand work per MoE layer (ours): " << fixed(idle * 1e3, 3) << " ms against "
            << fixed(gpu.transfer_seconds(eb) * 1e3, 3) << " ms to load one expert: prefetches "
            << (ours.cache.prefetches_started == 0
                    ? "never start (the idle gaps are shorter than one " +
                          fixed(static_cast<double>(edge_replay_config{}.chunk_bytes) / (1024.0 * 1024.0), 0) +
                          " MiB chunk, " + fixed(gpu.transfer_seconds(edge_replay_config{}.chunk_bytes) * 1e3, 3) +
                          " ms)"
                    : (idle >= gpu.transfer_seconds(eb) ? std::string("can land whole")
                                                        : std::string("land only in part (late: the rest is loaded)")))
            << "; " << ours.cache.prefetches << " queued, " << ours.cache.prefetches_started << " started, "
            << ours.cache.prefetches_landed << " landed, " << ours.cache.late_prefetches << " late\n";
        if (trace.info().has_scores) {
          for (std::size_t ai = 0; ai < opt.alphas.size(); ++ai) {
            const double a = opt.alphas[ai];
            const edge_replay_result& s = swept[si * per_setting + 1 + ai];
            auto it = std::find_if(sweep.begin(), sweep.end(),
                                   [&](const sweep_row& x) { return x.batch == B && x.alpha == a; });
            if (it == sweep.end()) {
              sweep.push_back({B, a, {}});
              it = sweep.end() - 1;
            }
            it->per_setting.push_back(s.systems[0]);
          }
        }
      }
    }
    if (!trace.info().has_scores) {
      out << "\n  alpha sweep (Tab. 3's range): not run — this trace has only the top-k gate weights, so beta, the\n"
             "  (k+1)-th score, is unknown and the router substitutes nothing at any alpha.\n";
      continue;
    }
    out << "\n  alpha sweep of ours (Tab. 3's range), " << cap.label << ": TPOT ms / substitutions / mass kept\n";
    std::vector<std::string> head{"batch", "alpha"};
    for (const auto& s : settings) head.push_back(s.id + " " + s.gpu.name);
    text_table st(head);
    for (const auto& p : sweep) {
      std::vector<std::string> row{std::to_string(p.batch), fixed(p.alpha, 2)};
      for (const auto& r : p.per_setting) {
        row.push_back(fixed(r.tpot() * 1e3, 2) + " / " + std::to_string(r.substituted) + " / " +
                      fixed(r.mass_kept(), 3));
      }
      st.add(row);
    }
    st.print(out, "    ");
  }
  out << "  hit % = hits over the distinct experts each batched layer needs after routing (a hit: resident and\n"
         "  landed at the router's output); bypassed = no expert ever entered the GPU cache (every miss ran on the\n"
         "  CPU), so there is no hit ratio to speak of; late = prefetches not landed when needed (the rest loaded).\n"
         "  Belady = MIN's demand hit ratio on the unrouted accesses at the same size (untimed): prefetching can pass "
         "it.\n";
}

void print_settings(const options& opt, std::ostream& out) {
  const device_spec cpu = cpu_for(opt);
  if (opt.gpu) {
    out << "edge setting: the given GPU and " << (opt.cpu ? "CPU" : "the paper's CPU (6 cores)") << ":\n";
  } else {
    out << "edge settings (Edge-MoE Tab. 1; 6 CPU cores; PCIe 4.0 at the nominal 2 GB/s per lane, 1 us per "
           "transfer):\n";
  }
  text_table dev({"setting", "GPU", "memory", "BF16 TFLOP/s", "mem GB/s", "PCIe GB/s", "alpha", "preset"});
  const std::vector<std::string> names{"rtx_3080_ti", "rtx_4060_ti_16gb", "rtx_a6000"};
  std::size_t i = 0;
  for (const auto& s : settings_for(opt)) {
    dev.add({s.id, s.gpu.name, fixed(static_cast<double>(s.gpu.capacity_bytes) / gib, 0) + " GiB",
             fixed(s.gpu.compute.peak_flops / tera, 1), fixed(s.gpu.compute.memory_bandwidth / giga, 0),
             fixed(s.gpu.weight_link.bandwidth / giga, 2), fixed(s.alpha, 2), opt.gpu ? "--machine" : names[i]});
    ++i;
  }
  dev.add({"CPU", cpu.name, "host", fixed(cpu.compute.peak_flops / tera, 3),
           fixed(cpu.compute.memory_bandwidth / giga, 1), "-", "-", opt.cpu ? "--machine" : "ryzen9_5900x_6c"});
  dev.print(out, "  ");
  out << "Each system on the timed model (sim/edge_replay.hpp): per layer attention and the router on the GPU, hits\n"
         "computed at once, loads over PCIe (first in, first out) then computed, CPU experts after their activations\n"
         "cross; prefetches use only the link's idle time. Batch B = B decode streams (sim/decode_streams.hpp).\n";
}

}  // namespace moepolicy::examples::edge_offload
