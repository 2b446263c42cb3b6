// The context-aware GPU + CXL-NDP comparison of the context_aware_ndp driver (see
// drivers/context_aware_ndp.hpp).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/model_match.hpp"
#include "common/table.hpp"
#include "common/trace_input.hpp"
#include "drivers/context_aware_ndp.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/io/tables_json.hpp"
#include "moepolicy/sim/gpu_ndp_replay.hpp"
#include "moepolicy/stats/analysis.hpp"

namespace moepolicy::examples::context_aware_ndp {

namespace fs = std::filesystem;

namespace {

using system_t = gpu_ndp_system<roofline_cost, roofline_cost>;

/// A table whose rows are layers 0..L-1, as a layers × experts matrix.
Eigen::MatrixXd to_matrix(const expert_table& t) {
  Eigen::MatrixXd m(static_cast<Eigen::Index>(t.num_rows()), static_cast<Eigen::Index>(t.num_experts()));
  for (std::size_t r = 0; r < t.num_rows(); ++r) {
    for (std::size_t e = 0; e < t.num_experts(); ++e) {
      m(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(e)) = t.value(r, e);
    }
  }
  return m;
}

std::string gb(double b) { return fixed(b / 1e9, 2); }
std::string ms(double s) { return fixed(s * 1e3, 3); }

/// The systems compared, in print order.
std::vector<gpu_ndp_system_config> systems_for(bool with_table) {
  std::vector<gpu_ndp_system_config> s;
  if (with_table) {
    s.push_back({"context-aware, avg 3 bits", gpu_ndp_system_kind::context_aware, 3.0});
    s.push_back({"context-aware, avg 2 bits", gpu_ndp_system_kind::context_aware, 2.0});
    s.push_back({"  same, decoding waits for the copy", gpu_ndp_system_kind::context_aware, 2.0, bitwidth{3},
                 placement_copy::blocking});
  }
  s.push_back({"uniform 3 bits (no selector)", gpu_ndp_system_kind::uniform_bits, 3.0, bitwidth{3}});
  s.push_back({"uniform 2 bits (no selector)", gpu_ndp_system_kind::uniform_bits, 2.0, bitwidth{2}});
  s.push_back({with_table ? "static calibration set, avg 2 bits" : "static calibration set, 2 bits",
               gpu_ndp_system_kind::static_placement, 2.0, bitwidth{2}});
  s.push_back({"MoNDE (on-demand migration), FP16", gpu_ndp_system_kind::monde});
  s.push_back({"HOBBIT-like GPU-only, FP16 + 4-bit misses", gpu_ndp_system_kind::hobbit_like});
  return s;
}

const gpu_ndp_system_result* find(const gpu_ndp_replay_result& r, gpu_ndp_system_kind kind, double bits = 0.0,
                                  placement_copy copy = placement_copy::overlapped) {
  for (const auto& s : r.systems) {
    if (s.config.kind != kind || s.config.copy != copy) continue;
    if (bits > 0.0 && s.config.average_bits != bits) continue;
    return s.ok() ? &s : nullptr;
  }
  return nullptr;
}

}  // namespace

void run(const fs::path& path, const options& opt, std::ostream& out) {
  run(path, examples::load_trace(path), opt, out);
}

void run(const fs::path& path, const routing_trace& trace, const options& opt, std::ostream& out) {
  const auto shape = examples::preset_for(trace.info());
  if (!shape) throw std::runtime_error(path.string() + ": no model preset matches this trace's model");
  const auto& info = trace.info();
  std::optional<loss_table> table;
  if (!opt.loss_table.empty() && fs::exists(opt.loss_table)) {
    loss_table t = io::read_quant_loss_json(opt.loss_table);
    if (t.num_layers() == info.num_layers && t.num_experts() == info.num_experts) table = std::move(t);
  }
  std::optional<gpu_ndp_calibration> calibration;
  if (!opt.calibration.empty() && fs::exists(opt.calibration)) {
    const io::activation_stats a = io::read_activation_stats_json(opt.calibration);
    if (a.frequency.num_rows() == info.num_layers && a.frequency.num_experts() == info.num_experts &&
        a.frequency.layer_of(a.frequency.num_rows() - 1) + 1u == info.num_layers) {
      gpu_ndp_calibration c;
      c.source = a.calibration.empty() ? opt.calibration.filename().string()
                                       : a.calibration + " statistics (" + opt.calibration.filename().string() + ")";
      c.counts = to_matrix(a.frequency);
      c.weight_sums = to_matrix(a.weight_sum);
      calibration = std::move(c);
    }
  }
  std::size_t with_prefill = 0;
  for (const auto& r : trace.requests()) {
    bool p = false, d = false;
    for (const auto& st : trace.steps_of(r)) (st.kind == phase::prefill ? p : d) = true;
    with_prefill += (p && d) ? 1 : 0;
  }
  const std::size_t K = opt.gpu_experts == 0 ? info.num_experts / 2 : opt.gpu_experts;
  const system_t system{roofline_cost{opt.gpu, *shape}, roofline_cost{opt.ndp, *shape}};
  const std::vector<gpu_ndp_system_config> systems = systems_for(table.has_value());
  gpu_ndp_replay_config config{.gpu_experts_per_layer = K, .importance = {.alpha = opt.alpha}};
  if (!calibration && with_prefill > 1) config.calibration_requests = 1;

  out << "trace: " << path.string() << '\n'
      << "  model " << shape->name << ", " << info.num_layers << " layers x " << info.num_experts << " experts, top-"
      << info.top_k << "; K = " << K << " experts per layer in GPU HBM\n"
      << "  devices: " << system.gpu().name() << " + " << system.ndp().name()
      << "; loss table: " << (table ? opt.loss_table.string() : std::string("none for this model")) << '\n';
  if (with_prefill == 0) {
    out << "  no request has both prefill and decode steps: nothing to replay\n";
    return;
  }
  const gpu_ndp_replay_result res = replay_gpu_ndp(trace, system, *shape, table ? &*table : nullptr,
                                                   calibration ? &*calibration : nullptr, systems, config);
  out << "  calibration: "
      << (res.calibration.empty() ? std::string("none (one request): the GPU starts empty")
                                  : res.calibration + (calibration ? "" : " (not measured)"))
      << "; it gives the static placement and every system's GPU set before the first request\n";
  const bytes expert_bytes_fp16 = system.gpu().footprint_bytes({0, 0}, fp16);
  const bytes non_expert = non_expert_weight_bytes(*shape);
  out << "  HBM: needs " << gb(static_cast<double>(res.hbm_needed_bytes)) << " GB of "
      << gb(static_cast<double>(res.hbm_capacity_bytes)) << " GB (non-expert weights "
      << gb(static_cast<double>(non_expert)) << ", " << K * info.num_layers << " experts at FP16 "
      << gb(static_cast<double>(K * info.num_layers * expert_bytes_fp16)) << ", KV cache of the longest request "
      << gb(static_cast<double>(res.hbm_needed_bytes - non_expert - K * info.num_layers * expert_bytes_fp16)) << ")\n";

  out << "  prefill <-> decode cosine similarity of expert activations (Context-Aware GPU-NDP Sec. 3.2 reports "
         "0.89):\n";
  text_table sim({"request", "prefill tokens", "mean over layers", "min layer", "max layer"});
  for (const auto& r : res.requests) {
    const defined_summary d = summarize_defined(r.similarity);
    sim.add({r.name, std::to_string(r.prefill_tokens), fixed(d.mean, 3), fixed(d.min, 3), fixed(d.max, 3)});
  }
  sim.print(out, "    ");
  if (opt.per_layer) {
    for (const auto& r : res.requests) {
      out << "    " << r.name << " per layer:";
      for (double s : r.similarity) out << ' ' << (std::isnan(s) ? std::string("n/a") : fixed(s, 2));
      out << '\n';
    }
  }

  std::uint64_t prompt = 0, steps = 0;
  for (const auto& r : res.requests) prompt += r.prefill_tokens;
  for (const auto& s : res.systems) {
    if (s.ok()) {
      steps = s.decode_steps();
      break;
    }
  }
  out << "  as recorded: " << res.requests.size() << " request(s), " << prompt << " prompt tokens, " << steps
      << " decode steps, one sequence at a time; every second on the GPU, the NDP device and the PCIe link in each\n"
         "  direction from the timed model (attention over the KV cache, router and output head on the GPU; the\n"
         "  placement copy, fetches and activations as transfers):\n";
  const gpu_ndp_system_result* monde = find(res, gpu_ndp_system_kind::monde);
  text_table t({"system", "TTFT ms", "decode ms/token", "tok/s", "end-to-end ms", "vs MoNDE", "NDP ms/token",
                "copied GB", "fetched GB", "mean loss", "prefix/exact"});
  std::vector<std::string> notes;
  for (const auto& s : res.systems) {
    if (!s.ok()) {
      t.add({s.config.label, "-", "-", "-", "-", "-", "-", "-", "-", "-", "-"});
      notes.push_back(s.config.label + ": " + std::string(to_string(s.status)) + " (" + s.status_detail + ")");
      continue;
    }
    const double n = static_cast<double>(s.requests.size());
    const seconds per_token = s.seconds_per_token();
    const resource_id ndp = s.accounts.find("ndp");
    double ndp_decode = 0.0;  // NDP busy per token over the whole run, startup and prefill included
    ndp_decode = s.accounts[ndp].busy() / static_cast<double>(std::max<std::uint64_t>(s.decode_steps(), 1));
    const double loss = s.mean_loss();
    t.add({s.config.label, ms(s.prefill_seconds() / n), ms(per_token), fixed(1.0 / per_token, 1),
           ms(s.mean_end_to_end()),
           monde != nullptr ? fixed(monde->mean_end_to_end() / s.mean_end_to_end(), 2) + "x" : "-", ms(ndp_decode),
           gb(static_cast<double>(s.copy_bytes())), gb(static_cast<double>(s.fetched_bytes())),
           !table ? "n/a" : (std::isnan(loss) ? "n/a" : fixed(loss, 1)),
           std::isnan(s.prefix_over_exact()) ? "-" : fixed(s.prefix_over_exact(), 4)});
  }
  t.print(out, "    ");
  out << "  TTFT = the prefill pass; vs MoNDE = MoNDE's end-to-end latency over the system's; NDP ms/token = the\n"
         "  NDP device's busy time over the run per decoded token; mean loss = L(l, e, b) per decode expert "
         "activation\n"
         "  (FP16: 0; n/a where a bitwidth is not in the table); prefix/exact = prefix split's loss over the exact\n"
         "  allocation's at the same budget.\n";
  for (const auto& n : notes) out << "  not run: " << n << '\n';

  // Where the time went, per request.
  out << "  where the time goes, ms per request (busy time of each resource; stalls = GPU idle before work whose\n"
         "  inputs were not ready):\n";
  text_table w({"system", "GPU attn", "GPU dense", "GPU experts", "GPU stalls", "NDP experts", "NDP copy reads",
                "to-GPU copy", "to-GPU fetch", "to-GPU results", "to-NDP act"});
  for (const auto& s : res.systems) {
    if (!s.ok()) continue;
    const double n = static_cast<double>(s.requests.size());
    const auto& a = s.accounts;
    const auto& g = a[a.find("gpu")];
    const auto& d = a[a.find("ndp")];
    const auto& up = a[a.find("link to GPU")];
    const auto& down = a[a.find("link to NDP")];
    w.add({s.config.label, ms(g.busy(cost_kind::attention) / n), ms(g.busy(cost_kind::dense) / n),
           ms(g.busy(cost_kind::expert) / n), ms(g.stall_seconds / n), ms(d.busy(cost_kind::expert) / n),
           ms((d.busy(cost_kind::placement) + d.busy(cost_kind::demand_fetch)) / n),
           ms(up.busy(cost_kind::placement) / n), ms(up.busy(cost_kind::demand_fetch) / n),
           ms(up.busy(cost_kind::activation) / n), ms(down.busy(cost_kind::activation) / n)});
  }
  w.print(out, "    ");
  for (const auto& s : res.systems) {
    if (!s.ok() || s.startup_bytes == 0) continue;
    out << "  startup (every system, before the first request): the initial GPU set, "
        << gb(static_cast<double>(s.startup_bytes)) << " GB, loads in " << ms(s.startup_seconds) << " ms\n";
    break;
  }

  // The placement copy of the context-aware system.
  if (const gpu_ndp_system_result* ctx = find(res, gpu_ndp_system_kind::context_aware, 2.0)) {
    out << "  the placement copy (context-aware, avg 2 bits): after each prefill the new GPU set is copied in the\n"
           "  background while decoding starts; an expert runs on the NDP device at FP16 until its copy lands:\n";
    text_table c({"request", "copied GB", "landed after ms", "decode steps while in flight", "decode steps"});
    for (const auto& r : ctx->requests) {
      c.add({r.request, gb(static_cast<double>(r.copy_bytes)),
             std::isnan(r.copy_landed_after) ? "cancelled" : ms(r.copy_landed_after),
             std::to_string(r.steps_during_copy), std::to_string(r.decode_steps)});
    }
    c.print(out, "    ");
    if (const gpu_ndp_system_result* block =
            find(res, gpu_ndp_system_kind::context_aware, 2.0, placement_copy::blocking)) {
      out << "  if decoding waits for the copy: " << ms(block->mean_end_to_end()) << " ms end to end against "
          << ms(ctx->mean_end_to_end()) << " ms overlapped\n";
    }
  }

  // Projection over lengths from the recorded routing.
  const bool any_ok = std::any_of(res.systems.begin(), res.systems.end(), [](const auto& s) { return s.ok(); });
  if (opt.projection && table && any_ok) {
    std::vector<gpu_ndp_system_config> shown = {systems[1], systems[0]};
    for (const auto& sc : systems) {
      if (sc.kind == gpu_ndp_system_kind::static_placement && calibration) shown.push_back(sc);
    }
    shown.push_back({"MoNDE", gpu_ndp_system_kind::monde});
    shown.push_back({"HOBBIT-like", gpu_ndp_system_kind::hobbit_like});
    const std::size_t recorded_prompt = res.requests.empty() ? 0 : res.requests.front().prefill_tokens;
    const std::size_t recorded_output = steps / std::max<std::size_t>(res.requests.size(), 1);
    const std::vector<std::size_t> prompts = {0, 2048};
    const std::vector<std::size_t> outputs = {8, 32, 0, 256, 1024};
    out << "  projection (Context-Aware GPU-NDP Sec. 5.2 measures several prompt/output lengths): each request "
           "replayed\n"
           "  at other lengths by looping its recorded prefill rows and decode steps; end-to-end ms per request and,\n"
           "  in brackets, decode tokens/s:\n";
    std::vector<std::string> header{"prompt", "output"};
    for (const auto& s : shown) header.push_back(s.label);
    text_table p(header);
    // e2e[prompt][output][system]
    std::vector<std::vector<std::vector<double>>> e2e(
        prompts.size(), std::vector<std::vector<double>>(outputs.size(), std::vector<double>(shown.size(), 0.0)));
    for (std::size_t pi = 0; pi < prompts.size(); ++pi) {
      for (std::size_t oi = 0; oi < outputs.size(); ++oi) {
        gpu_ndp_replay_config c = config;
        c.prompt_tokens = prompts[pi];
        c.output_tokens = outputs[oi];
        const auto r = replay_gpu_ndp(trace, system, *shape, &*table, calibration ? &*calibration : nullptr, shown, c);
        std::vector<std::string> row{
            prompts[pi] == 0 ? std::to_string(recorded_prompt) + " (recorded)" : std::to_string(prompts[pi]),
            outputs[oi] == 0 ? std::to_string(recorded_output) + " (recorded)" : std::to_string(outputs[oi])};
        for (std::size_t k = 0; k < shown.size(); ++k) {
          const auto& s = r.systems[k];
          if (!s.ok()) {
            row.push_back("-");
            continue;
          }
          e2e[pi][oi][k] = s.mean_end_to_end();
          row.push_back(ms(s.mean_end_to_end()) + " (" + fixed(1.0 / s.seconds_per_token(), 1) + ")");
        }
        p.add(row);
      }
    }
    p.print(out, "    ");
    // Against each rival, the shortest tabulated output at which the context-aware system
    // is no slower end to end.
    const auto length = [&](std::size_t oi) { return outputs[oi] == 0 ? recorded_output : outputs[oi]; };
    for (std::size_t k = 0; k < 2; ++k) {
      for (std::size_t rival = 2; rival + 1 < shown.size(); ++rival) {
        // Like against like: the static set at the same average bits, MoNDE for both.
        if (shown[rival].kind == gpu_ndp_system_kind::static_placement &&
            shown[rival].average_bits != shown[k].average_bits) {
          continue;
        }
        out << "  " << shown[k].label << " vs " << shown[rival].label << ":";
        for (std::size_t pi = 0; pi < prompts.size(); ++pi) {
          std::size_t best = 0;
          bool found = false;
          for (std::size_t oi = 0; oi < outputs.size(); ++oi) {
            if (e2e[pi][oi][k] <= 0.0 || e2e[pi][oi][rival] <= 0.0) continue;
            if (e2e[pi][oi][k] <= e2e[pi][oi][rival] && (!found || length(oi) < best)) {
              best = length(oi);
              found = true;
            }
          }
          out << (pi == 0 ? " " : "; ") << "prompt " << (prompts[pi] == 0 ? recorded_prompt : prompts[pi]) << ": "
              << (found ? "as fast or faster from " + std::to_string(best) + " decoded tokens"
                        : std::string("slower at every output length up to 1024"));
        }
        out << '\n';
      }
    }
  }

  out << "  paper (Context-Aware GPU-NDP Sec. 5.2, Mixtral-8x7B, Ramulator-modelled NDP): 6.6-8.3x (3 bits) and\n"
         "  7.9-10.6x (2 bits) end to end over MoNDE, 8.7x and 11.2x decoding throughput; up to 18x over HOBBIT.\n"
         "  left out here: batching several sequences, the NDP device's internal pipelining of experts (they run\n"
         "  one after another), DRAM timing below bandwidth and latency, kernel launch overheads (0 in the presets),\n"
         "  HOBBIT's prefetching and cache policy, and KV-cache traffic (it stays in HBM).\n";
}

}  // namespace moepolicy::examples::context_aware_ndp
