// python/src/online.cpp — decisions made once per step or per layer, for engines and
// notebooks: the two-pointer and exact CPU-load balancers (Edge-MoE §5.4, Alg. 2), the
// expert-cache router (Edge-MoE §5.1, Alg. 1), the makespan solvers of one step (TriMoE §4.2)
// and over many steps, the EMA load predictor (TriMoE §4.3, Eq. 8) and the precision-target
// selector (DynaExq §3.5). Objects keep their scratch between calls, as the C++ classes do.
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common.hpp"
#include "moepolicy/balance/two_pointer.hpp"
#include "moepolicy/predict/ema_load_predictor.hpp"
#include "moepolicy/predict/precision_target.hpp"
#include "moepolicy/route/expert_cache_router.hpp"
#include "moepolicy/sched/bottleneck_refinement.hpp"
#include "moepolicy/sched/exact.hpp"
#include "moepolicy/sched/local_search.hpp"
#include "moepolicy/sched/lower_bound.hpp"
#include "moepolicy/sched/problem.hpp"

namespace moepolicy::python {
namespace {

// ---- balancers ----------------------------------------------------------------------

/// A split: which experts are loaded (0) and which run on the CPU (1), and its totals.
struct balance_output {
  py::array_t<std::uint8_t> sides;
  balance_result totals;
};

balance_output make_output(std::size_t n) {
  return balance_output{py::array_t<std::uint8_t>(static_cast<py::ssize_t>(n)), {}};
}

std::span<balance_side> sides_of(balance_output& o) {
  static_assert(sizeof(balance_side) == 1);
  return {reinterpret_cast<balance_side*>(o.sides.mutable_data()), static_cast<std::size_t>(o.sides.size())};
}

class py_two_pointer {
 public:
  py_two_pointer(double cpu_seconds_per_token, double load_seconds, std::size_t max_items)
      : b_(two_pointer_config{cpu_seconds_per_token, load_seconds, max_items}) {}

  balance_output run(py::handle batch_sizes, bool optimal) {
    constexpr std::string_view fn = "TwoPointerBalancer.balance";
    py::array a = read_integers(batch_sizes, fn, "batch_sizes", 0, 0xffffffffu, sizes_);
    need_ndim(a, 1, fn, "batch_sizes");
    if (sizes_.size() > b_.config().max_items) {
      detail::throw_invalid(fn, "at most max_items = " + std::to_string(b_.config().max_items) + " experts, size",
                            sizes_.size());
    }
    balance_output o = make_output(sizes_.size());
    maybe_release unlock(sizes_.size());
    o.totals = optimal ? b_.balance_optimal(sizes_, sides_of(o)) : b_.balance(sizes_, sides_of(o));
    return o;
  }

  const two_pointer_config& config() const { return b_.config(); }

 private:
  two_pointer_balancer b_;
  std::vector<std::uint32_t> sizes_;
};

// ---- router -------------------------------------------------------------------------

class py_router {
 public:
  py_router(std::uint32_t num_experts, std::uint32_t top_k, double alpha, bool prefer_batch_shared)
      : r_(router_config{num_experts, top_k, alpha, prefer_batch_shared}) {
    resident_.assign(num_experts, 0);
    seen_.assign(num_experts, 0);
  }

  py::tuple route(py::handle ids_obj, py::handle weights_obj, py::handle scores_obj, py::handle resident_obj) {
    constexpr std::string_view fn = "Router.route";
    const std::size_t E = r_.config().num_experts;
    const std::size_t k = r_.config().top_k;
    py::array ia = read_integers(ids_obj, fn, "ids", 0, E - 1, ids32_);
    need_ndim(ia, 2, fn, "ids (tokens x top_k)");
    if (static_cast<std::size_t>(ia.shape(1)) != k) {
      detail::throw_invalid(fn, "ids must have top_k = " + std::to_string(k) + " columns", ia.shape(1));
    }
    const std::size_t tokens = static_cast<std::size_t>(ia.shape(0));
    const std::size_t n = ids32_.size();
    ids_.resize(n);
    for (std::size_t t = 0; t < tokens; ++t) {
      for (std::size_t j = 0; j < k; ++j) {
        const std::uint32_t e = ids32_[t * k + j];
        if (seen_[e] != 0) {
          for (std::size_t q = 0; q < j; ++q) seen_[ids32_[t * k + q]] = 0;
          detail::throw_invalid(fn, "token " + std::to_string(t) + " selects an expert twice, expert", e);
        }
        seen_[e] = 1;
        ids_[t * k + j] = static_cast<expert_id>(e);
      }
      for (std::size_t j = 0; j < k; ++j) seen_[ids32_[t * k + j]] = 0;
    }
    auto wa = read_reals<float>(weights_obj, fn, "weights");
    need_size(wa, n, fn, "weights (tokens x top_k)");
    need_finite(span_of(wa), fn, "weights", true);
    std::span<const float> scores;
    std::optional<py::array_t<float, py::array::c_style>> sa;
    if (!scores_obj.is_none()) {
      sa = read_reals<float>(scores_obj, fn, "scores");
      need_size(*sa, tokens * E, fn, "scores (tokens x num_experts)");
      scores = span_of(*sa);
      need_finite(scores, fn, "scores", true);
    }
    if (resident_obj.is_none()) {
      std::fill(resident_.begin(), resident_.end(), std::uint8_t{0});
    } else {
      py::array ra = read_integers(resident_obj, fn, "resident", 0, 1, resident_);
      need_size(ra, E, fn, "resident (one flag per expert)");
    }
    py::array_t<std::uint16_t> out_ids(std::vector<py::ssize_t>{ia.shape(0), ia.shape(1)});
    py::array_t<float> out_w(std::vector<py::ssize_t>{ia.shape(0), ia.shape(1)});
    route_result r;
    {
      maybe_release unlock(n * 8);
      r = r_.route(
          ids_, span_of(wa), scores, [&](expert_id e) { return resident_[e] != 0; },
          std::span<expert_id>(out_ids.mutable_data(), n), std::span<float>(out_w.mutable_data(), n));
    }
    py::dict d;
    d["tokens"] = r.tokens;
    d["selections"] = r.selections;
    d["top_score"] = r.top_score;
    d["low_score"] = r.low_score;
    d["unscored"] = r.unscored;
    d["low_kept_resident"] = r.low_kept_resident;
    d["substituted"] = r.substituted;
    d["unreplaced"] = r.unreplaced;
    d["mass_preserved"] = r.mass_preserved();
    d["kept_fraction"] = r.kept_fraction();
    d["full_scores"] = r.full_scores;
    return py::make_tuple(out_ids, out_w, d);
  }

  const router_config& config() const { return r_.config(); }

 private:
  expert_cache_router r_;
  std::vector<std::uint32_t> ids32_;
  std::vector<expert_id> ids_;
  std::vector<std::uint8_t> resident_, seen_;
};

// ---- makespan solvers -----------------------------------------------------------------

using any_makespan_solver =
    std::variant<bottleneck_refinement_scheduler, local_search_scheduler, exact_makespan_scheduler>;

any_makespan_solver solver_by_name(const std::string& name) {
  if (name == "trimoe") return bottleneck_refinement_scheduler{};
  if (name == "local-search") return local_search_scheduler{};
  if (name == "exact") return exact_makespan_scheduler{};
  detail::throw_invalid("MakespanSolver", "unknown solver (known: trimoe, local-search, exact)", name);
}

/// The rows of one step's problem, checked, as arrays.
struct step_rows {
  py::array_t<double, py::array::c_style> exec, dram;
  std::vector<std::int32_t> home;
  std::vector<std::uint8_t> resident;
  std::size_t n = 0;
};

step_rows read_rows(std::string_view fn, py::handle exec, py::handle dram, py::handle home, py::handle resident) {
  step_rows r;
  r.exec = read_reals<double>(exec, fn, "exec");
  need_ndim(r.exec, 2, fn, "exec (experts x 3: gpu, cpu, ndp seconds; inf where not allowed)");
  if (r.exec.shape(1) != 3) detail::throw_invalid(fn, "exec must have 3 columns (gpu, cpu, ndp)", r.exec.shape(1));
  r.n = static_cast<std::size_t>(r.exec.shape(0));
  r.dram = read_reals<double>(dram, fn, "dram");
  need_size(r.dram, r.n, fn, "dram (one per expert)");
  if (home.is_none()) {
    r.home.assign(r.n, -1);
  } else {
    py::array a = read_integers(home, fn, "home (-1: striped, else the DIMM)", -1, 65533, r.home);
    need_size(a, r.n, fn, "home (one per expert)");
  }
  if (resident.is_none()) {
    r.resident.assign(r.n, 0);
  } else {
    py::array a = read_integers(resident, fn, "resident", 0, 1, r.resident);
    need_size(a, r.n, fn, "resident (one per expert)");
  }
  return r;
}

void add_rows(makespan_problem& p, const step_rows& r, std::size_t begin, std::size_t end) {
  const double* x = r.exec.data();
  const double* d = r.dram.data();
  for (std::size_t i = begin; i < end; ++i) {
    expert_costs c;
    c.layout =
        r.home[i] < 0 ? expert_layout::striped() : expert_layout::localized(static_cast<std::uint16_t>(r.home[i]));
    c.gpu_resident = r.resident[i] != 0;
    c.exec = {x[3 * i], x[3 * i + 1], x[3 * i + 2]};
    c.dram = d[i];
    p.add(c);
  }
}

void solve_with(any_makespan_solver& s, const makespan_problem& p, makespan_schedule& out) {
  std::visit([&](auto& solver) { solver.solve(p, out); }, s);
}

class py_makespan_solver {
 public:
  explicit py_makespan_solver(const std::string& name) : name_(name), s_(solver_by_name(name)) {}

  py::dict solve(py::handle exec, py::handle dram, py::handle home, py::handle resident, std::size_t num_dimms) {
    constexpr std::string_view fn = "MakespanSolver.solve";
    step_rows rows = read_rows(fn, exec, dram, home, resident);
    if (!p_ || p_->num_dimms() != num_dimms) p_.emplace(num_dimms, rows.n);
    p_->clear();
    add_rows(*p_, rows, 0, rows.n);
    makespan_bound bound;
    {
      maybe_release unlock(rows.n * 64);
      solve_with(s_, *p_, out_);
      bound = makespan_lower_bound(*p_);
    }
    py::dict d;
    py::array_t<std::uint8_t> a(static_cast<py::ssize_t>(rows.n));
    for (std::size_t i = 0; i < rows.n; ++i) a.mutable_data()[i] = static_cast<std::uint8_t>(out_.assignment[i]);
    d["assignment"] = a;
    d["status"] = std::string(to_string(out_.status));
    d["makespan"] = out_.makespan;
    d["gpu_seconds"] = out_.gpu_seconds;
    d["cpu_seconds"] = out_.cpu_seconds;
    d["dimm_seconds"] = to_numpy<double>(out_.dimm_seconds);
    d["iterations"] = out_.iterations;
    d["lower_bound"] = bound.value;
    return d;
  }

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  any_makespan_solver s_;
  std::optional<makespan_problem> p_;
  makespan_schedule out_;
};

py::dict solve_steps(py::handle step, py::handle exec, py::handle dram, py::handle home, py::handle resident,
                     std::size_t num_dimms, const std::string& solver) {
  constexpr std::string_view fn = "solve_steps";
  auto s = solver_by_name(solver);
  step_rows rows = read_rows(fn, exec, dram, home, resident);
  std::vector<std::uint32_t> steps;
  py::array sa = read_integers(step, fn, "step", 0, 0xffffffffu, steps);
  need_size(sa, rows.n, fn, "step (one per expert row)");
  for (std::size_t i = 1; i < rows.n; ++i) {
    if (steps[i] < steps[i - 1]) {
      detail::throw_invalid(
          fn, "rows must be grouped by step in ascending order; row " + std::to_string(i) + " has step", steps[i]);
    }
  }
  makespan_problem p(num_dimms, rows.n);
  // Run boundaries and problems are checked before the GIL is released (add may throw).
  std::vector<std::size_t> starts;
  for (std::size_t i = 0; i < rows.n; ++i) {
    if (i == 0 || steps[i] != steps[i - 1]) starts.push_back(i);
  }
  starts.push_back(rows.n);
  const std::size_t S = starts.size() - 1;
  std::vector<std::uint8_t> assignment(rows.n);
  std::vector<double> makespan(S), bound(S), gpu(S), cpu(S);
  std::vector<std::uint32_t> step_ids(S);
  std::vector<std::string> status(S);
  makespan_schedule out;
  for (std::size_t j = 0; j < S; ++j) {
    p.clear();
    add_rows(p, rows, starts[j], starts[j + 1]);
    {
      maybe_release unlock((starts[j + 1] - starts[j]) * 64);
      solve_with(s, p, out);
    }
    for (std::size_t i = starts[j]; i < starts[j + 1]; ++i) {
      assignment[i] = static_cast<std::uint8_t>(out.assignment[i - starts[j]]);
    }
    makespan[j] = out.makespan, gpu[j] = out.gpu_seconds, cpu[j] = out.cpu_seconds;
    bound[j] = makespan_lower_bound(p).value;
    status[j] = std::string(to_string(out.status));
    step_ids[j] = steps[starts[j]];
  }
  py::dict d;
  const auto ns = static_cast<py::ssize_t>(S);
  d["assignment"] = adopt(std::move(assignment), {static_cast<py::ssize_t>(rows.n)});
  d["step"] = adopt(std::move(step_ids), {ns});
  d["makespan"] = adopt(std::move(makespan), {ns});
  d["gpu_seconds"] = adopt(std::move(gpu), {ns});
  d["cpu_seconds"] = adopt(std::move(cpu), {ns});
  d["lower_bound"] = adopt(std::move(bound), {ns});
  d["status"] = status;
  return d;
}

// ---- predictors -----------------------------------------------------------------------

void check_layer(std::string_view fn, std::size_t layer, std::size_t layers) {
  if (layer >= layers) detail::throw_invalid(fn, "layer must be < num_layers " + std::to_string(layers), layer);
}

class py_ema {
 public:
  py_ema(std::size_t layers, std::size_t experts, double alpha, double hot_share, double cold_share, bool warm_start)
      : p_(layers, experts, ema_load_predictor_config{alpha, share_classes_config{hot_share, cold_share}, warm_start}) {
  }

  void update(std::uint32_t layer, py::handle loads) {
    constexpr std::string_view fn = "EmaLoadPredictor.update";
    check_layer(fn, layer, p_.num_layers());
    py::array a = as_contiguous(loads, fn, "loads");
    if (a.dtype().kind() == 'f') {
      auto r = read_reals<double>(a, fn, "loads");
      need_size(r, p_.num_experts(), fn, "loads (one per expert)");
      need_finite(span_of(r), fn, "loads", true);
      p_.update(static_cast<layer_id>(layer), span_of(r));
    } else {
      read_integers(a, fn, "loads", 0, 0xffffffffu, ints_);
      need_size(a, p_.num_experts(), fn, "loads (one per expert)");
      p_.update(static_cast<layer_id>(layer), std::span<const std::uint32_t>(ints_));
    }
  }

  py::array_t<double> predicted_loads(std::uint32_t layer) const {
    check_layer("EmaLoadPredictor.predicted_loads", layer, p_.num_layers());
    return to_numpy(p_.predicted_loads(static_cast<layer_id>(layer)));
  }

  py::array_t<std::uint8_t> predicted_classes(std::uint32_t layer) const {
    check_layer("EmaLoadPredictor.predicted_classes", layer, p_.num_layers());
    const auto c = p_.predicted_classes(static_cast<layer_id>(layer));
    py::array_t<std::uint8_t> out(static_cast<py::ssize_t>(c.size()));
    for (std::size_t i = 0; i < c.size(); ++i) out.mutable_data()[i] = static_cast<std::uint8_t>(c[i]);
    return out;
  }

  ema_load_predictor& get() { return p_; }
  const ema_load_predictor& get() const { return p_; }

 private:
  ema_load_predictor p_;
  std::vector<std::uint32_t> ints_;
};

target_hysteresis hysteresis_by_name(const std::string& s) {
  if (s == "none") return target_hysteresis::none;
  if (s == "margin") return target_hysteresis::margin;
  if (s == "rank_slack") return target_hysteresis::rank_slack;
  detail::throw_invalid("PrecisionTargetSelector", "mode must be none, margin or rank_slack", s);
}

rank_slack_form slack_by_name(const std::string& s) {
  if (s == "symmetric") return rank_slack_form::symmetric;
  if (s == "protect_members") return rank_slack_form::protect_members;
  detail::throw_invalid("PrecisionTargetSelector", "slack_form must be symmetric or protect_members", s);
}

std::vector<std::uint32_t> capacities(py::handle capacity, std::size_t layers) {
  std::vector<std::uint32_t> out;
  if (py::isinstance<py::int_>(capacity)) {
    const auto c = capacity.cast<long long>();
    if (c < 0 || c > 0xffffffffLL) detail::throw_invalid("PrecisionTargetSelector", "capacity must be >= 0", c);
    out.assign(layers, static_cast<std::uint32_t>(c));
    return out;
  }
  py::array a = read_integers(capacity, "PrecisionTargetSelector", "capacity", 0, 0xffffffffu, out);
  need_size(a, layers, "PrecisionTargetSelector", "capacity (an int, or one per layer)");
  return out;
}

class py_precision_target {
 public:
  py_precision_target(std::size_t layers, std::size_t experts, py::handle capacity, const std::string& mode,
                      double margin, std::size_t rank_slack, const std::string& slack_form, double min_hotness)
      : s_(capacities(capacity, layers), experts,
           precision_target_config{hysteresis_by_name(mode), margin, rank_slack, slack_by_name(slack_form),
                                   min_hotness}) {}

  py::tuple select(std::uint32_t layer, py::handle hotness, py::handle current) {
    constexpr std::string_view fn = "PrecisionTargetSelector.select";
    check_layer(fn, layer, s_.num_layers());
    auto h = read_reals<double>(hotness, fn, "hotness");
    need_size(h, s_.num_experts(), fn, "hotness (one per expert)");
    for (std::size_t i = 0; i < s_.num_experts(); ++i) {
      if (std::isnan(h.data()[i])) detail::throw_invalid(fn, "hotness must not be NaN, element", i);
    }
    layer_target t;
    if (current.is_none()) {
      t = s_.select(static_cast<layer_id>(layer), span_of(h));
    } else {
      py::array c = read_integers(current, fn, "current", 0, 1, current_);
      need_size(c, s_.num_experts(), fn, "current (one flag per expert)");
      t = s_.select(static_cast<layer_id>(layer), span_of(h), current_);
    }
    return py::make_tuple(to_numpy(t.target), to_numpy(t.promote), to_numpy(t.demote));
  }

  precision_target_selector& get() { return s_; }

 private:
  precision_target_selector s_;
  std::vector<std::uint8_t> current_;
};

}  // namespace

void bind_online(py::module_& m) {
  py::class_<balance_output>(m, "BalanceResult", "A split of experts between loading to the GPU and the CPU.")
      .def_readonly("sides", &balance_output::sides, "Per expert: 0 loaded to the GPU, 1 run on the CPU (uint8).")
      .def_property_readonly("load_seconds", [](const balance_output& o) { return o.totals.load_seconds; })
      .def_property_readonly("cpu_seconds", [](const balance_output& o) { return o.totals.cpu_seconds; })
      .def_property_readonly("loaded", [](const balance_output& o) { return o.totals.loaded; })
      .def_property_readonly("on_cpu", [](const balance_output& o) { return o.totals.on_cpu; })
      .def_property_readonly(
          "makespan", [](const balance_output& o) { return o.totals.makespan(); },
          "max(load_seconds, cpu_seconds): how long the layer waits.");

  py::class_<py_two_pointer>(m, "TwoPointerBalancer",
                             "Edge-MoE's two-pointer CPU-load balancer (§5.4, Alg. 2) and its exact counterpart, with\n"
                             "uniform costs: load_seconds per loaded expert, cpu_seconds_per_token on the CPU.")
      .def(py::init<double, double, std::size_t>(), py::arg("cpu_seconds_per_token"), py::arg("load_seconds"),
           py::arg("max_items") = 256)
      .def(
          "balance", [](py_two_pointer& b, py::handle sizes) { return b.run(sizes, false); }, py::arg("batch_sizes"),
          "Alg. 2 on the experts' batch sizes (tokens routed to each).")
      .def(
          "balance_optimal", [](py_two_pointer& b, py::handle sizes) { return b.run(sizes, true); },
          py::arg("batch_sizes"), "The optimum of the same problem (loads the j largest for the best j).")
      .def_property_readonly("cpu_seconds_per_token",
                             [](const py_two_pointer& b) { return b.config().cpu_seconds_per_token; })
      .def_property_readonly("load_seconds", [](const py_two_pointer& b) { return b.config().load_seconds; });

  m.def(
      "balance_exact",
      [](py::handle load, py::handle cpu) {
        constexpr std::string_view fn = "balance_exact";
        auto l = read_reals<double>(load, fn, "load");
        auto c = read_reals<double>(cpu, fn, "cpu");
        need_ndim(l, 1, fn, "load");
        need_size(c, static_cast<std::size_t>(l.size()), fn, "cpu (one per item)");
        need_finite(span_of(l), fn, "load", true);
        need_finite(span_of(c), fn, "cpu", true);
        balance_output o = make_output(static_cast<std::size_t>(l.size()));
        if (static_cast<std::size_t>(l.size()) > balance_exact_max_items) {
          detail::throw_invalid(fn, "at most 24 items can be enumerated", l.size());
        }
        {
          maybe_release unlock(std::size_t{1} << o.sides.size());
          o.totals = balance_exact(span_of(l), span_of(c), sides_of(o));
        }
        return o;
      },
      py::arg("load"), py::arg("cpu"),
      "The exact optimum of min max(sum of loaded load_i, sum of cpu_i on the CPU) over all 2^n splits\n"
      "(n <= 24), with per-item load and CPU seconds.");

  py::class_<py_router>(m, "Router",
                        "Edge-MoE's expert-cache router (§5.1, Alg. 1; prefer_batch_shared: §5.4): replaces low-score\n"
                        "selections by resident or already-selected alternatives.")
      .def(py::init<std::uint32_t, std::uint32_t, double, bool>(), py::arg("num_experts"), py::arg("top_k"),
           py::kw_only(), py::arg("alpha") = 0.3, py::arg("prefer_batch_shared") = false)
      .def("route", &py_router::route, py::arg("ids"), py::arg("weights"), py::arg("scores") = py::none(),
           py::arg("resident") = py::none(),
           "Routes one batch of one layer: ids and weights (tokens x top_k), optional router scores (tokens x\n"
           "num_experts; without them every token keeps its routing) and resident flags (one per expert).\n"
           "Returns (ids, weights, stats).");

  py::class_<py_makespan_solver>(
      m, "MakespanSolver",
      "A makespan solver of one step on a GPU + CPU + DIMM-NDP system (TriMoE §4.2, Eq. 5-7):\n"
      "'trimoe' (the paper's greedy + bottleneck refinement), 'local-search' or 'exact'.")
      .def(py::init<const std::string&>(), py::arg("solver") = "local-search")
      .def("solve", &py_makespan_solver::solve, py::arg("exec"), py::arg("dram"), py::arg("home") = py::none(),
           py::arg("resident") = py::none(), py::kw_only(), py::arg("num_dimms") = 1,
           "exec: experts x 3 seconds on (gpu, cpu, ndp), inf where not allowed; dram: each home DIMM's busy time\n"
           "per read; home: -1 striped, else the DIMM of a localized expert; resident: in GPU memory. Returns the\n"
           "assignment (0 gpu, 1 cpu, 2 ndp), the makespan and device totals, the status and a lower bound.")
      .def_property_readonly("name", &py_makespan_solver::name);

  m.def("solve_steps", &solve_steps, py::arg("step"), py::arg("exec"), py::arg("dram"), py::arg("home") = py::none(),
        py::arg("resident") = py::none(), py::kw_only(), py::arg("num_dimms") = 1, py::arg("solver") = "local-search",
        "Solves many steps in one call: rows as MakespanSolver.solve takes them, grouped by `step` (ascending).\n"
        "Returns per-row assignments and per-step makespans, totals, lower bounds and statuses.");

  py::class_<py_ema>(m, "EmaLoadPredictor",
                     "TriMoE's EMA load predictor (§4.3, Eq. 8) with hot / warm / cold classes by token share.")
      .def(py::init<std::size_t, std::size_t, double, double, double, bool>(), py::arg("num_layers"),
           py::arg("num_experts"), py::kw_only(), py::arg("alpha") = 0.3, py::arg("hot_share") = 0.5,
           py::arg("cold_share") = 0.1, py::arg("warm_start") = true)
      .def("update", &py_ema::update, py::arg("layer"), py::arg("loads"),
           "Folds one step's loads of a layer (one per expert; integers, or real shares) into the EMA.")
      .def("predicted_loads", &py_ema::predicted_loads, py::arg("layer"))
      .def("predicted_classes", &py_ema::predicted_classes, py::arg("layer"), "Per expert: 0 cold, 1 warm, 2 hot.")
      .def(
          "updates",
          [](const py_ema& p, std::uint32_t l) {
            check_layer("EmaLoadPredictor.updates", l, p.get().num_layers());
            return p.get().updates(static_cast<layer_id>(l));
          },
          py::arg("layer"))
      .def("reset", [](py_ema& p) { p.get().reset(); });

  py::class_<py_precision_target>(
      m, "PrecisionTargetSelector",
      "DynaExq's budget-feasible high-precision target set per layer with hysteresis (§3.5).")
      .def(py::init<std::size_t, std::size_t, py::handle, const std::string&, double, std::size_t, const std::string&,
                    double>(),
           py::arg("num_layers"), py::arg("num_experts"), py::arg("capacity"), py::kw_only(),
           py::arg("mode") = "margin", py::arg("margin") = 0.0, py::arg("rank_slack") = 0,
           py::arg("slack_form") = "symmetric", py::arg("min_hotness") = 0.0)
      .def("select", &py_precision_target::select, py::arg("layer"), py::arg("hotness"),
           py::arg("current") = py::none(),
           "Returns (target, promote, demote) expert ids for the layer; `current` (one flag per expert) defaults\n"
           "to the layer's previous target.")
      .def(
          "set_capacity",
          [](py_precision_target& s, std::uint32_t layer, std::uint32_t n) {
            check_layer("PrecisionTargetSelector.set_capacity", layer, s.get().num_layers());
            s.get().set_capacity(static_cast<layer_id>(layer), n);
          },
          py::arg("layer"), py::arg("capacity"))
      .def("reset", [](py_precision_target& s) { s.get().reset(); });
}

}  // namespace moepolicy::python
