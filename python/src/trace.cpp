// python/src/trace.cpp — traces: `read_trace` (every importer, by content), the columns as
// read-only numpy views without a copy, a trace built from numpy arrays, `write_canonical`.
//
// Zero-copy columns: each column property returns a numpy array over the trace's own vector
// whose `base` is the Python `Trace` object, so the trace lives as long as any view of it, and
// whose `writeable` flag is off (a trace is immutable once built).
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "common.hpp"
#include "moepolicy/io/read_trace.hpp"
#include "moepolicy/trace/canonical.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::python {
namespace {

/// A read-only view of `n` rows × `width` columns of `data`, kept alive by `owner`.
template <class T>
py::array column_view(const T* data, std::size_t rows, std::size_t width, bool two_d, py::handle owner) {
  std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(rows)};
  if (two_d) shape.push_back(static_cast<py::ssize_t>(width));
  py::array_t<T> a(shape, data, owner);
  a.attr("flags").attr("writeable") = false;
  return a;
}

routing_trace from_arrays(py::handle experts_obj, py::handle weights_obj, py::handle layer_obj, py::handle step_obj,
                          py::handle request_obj, py::handle phase_obj, py::handle position_obj, py::handle scores_obj,
                          std::optional<std::uint32_t> num_layers, std::optional<std::uint32_t> num_experts,
                          std::optional<std::vector<std::string>> names, std::string model, std::string source) {
  constexpr std::string_view fn = "Trace.from_arrays";
  std::vector<std::uint32_t> experts, layer, step, request, position;
  std::vector<std::uint8_t> kind;
  py::array ea = read_integers(experts_obj, fn, "experts", 0, 65535, experts);
  need_ndim(ea, 2, fn, "experts (rows x top_k)");
  const auto n = static_cast<std::size_t>(ea.shape(0));
  const auto k = static_cast<std::size_t>(ea.shape(1));
  auto wa = read_reals<float>(weights_obj, fn, "weights");
  if (wa.ndim() != 2 || static_cast<std::size_t>(wa.shape(0)) != n || static_cast<std::size_t>(wa.shape(1)) != k) {
    detail::throw_invalid(
        fn, "weights must have the shape of experts (" + std::to_string(n) + ", " + std::to_string(k) + "), size",
        wa.size());
  }
  read_integers(layer_obj, fn, "layer", 0, 65535, layer);
  read_integers(step_obj, fn, "step", 0, 0xffffffffu, step);
  read_integers(request_obj, fn, "request", 0, 0xffffffffu, request);
  read_integers(phase_obj, fn, "phase (0 prefill, 1 decode)", 0, 1, kind);
  const auto need_rows = [&](const auto& v, const char* what) {
    if (v.size() != n) {
      detail::throw_invalid(fn, std::string(what) + " must have one entry per row (" + std::to_string(n) + ")",
                            v.size());
    }
  };
  need_rows(layer, "layer");
  need_rows(step, "step");
  need_rows(request, "request");
  need_rows(kind, "phase");
  if (!position_obj.is_none()) {
    read_integers(position_obj, fn, "position", 0, 0xffffffffu, position);
    need_rows(position, "position");
  }
  std::optional<py::array_t<float, py::array::c_style>> sa;
  if (!scores_obj.is_none()) sa = read_reals<float>(scores_obj, fn, "scores");

  trace_info info;
  info.model = std::move(model);
  info.source = std::move(source);
  std::uint32_t max_layer = 0, max_expert = 0, max_request = 0;
  for (std::size_t i = 0; i < n; ++i) {
    max_layer = std::max(max_layer, layer[i]);
    max_request = std::max(max_request, request[i]);
  }
  for (std::uint32_t e : experts) max_expert = std::max(max_expert, e);
  info.num_layers = num_layers.value_or(n == 0 ? 1 : max_layer + 1);
  info.num_experts = num_experts.value_or(n == 0 ? k : max_expert + 1);
  info.top_k = static_cast<std::uint32_t>(k);
  info.has_scores = sa.has_value();
  if (sa && (sa->ndim() != 2 || static_cast<std::size_t>(sa->shape(0)) != n ||
             static_cast<std::size_t>(sa->shape(1)) != info.num_experts)) {
    detail::throw_invalid(fn,
                          "scores must have the shape (rows, num_experts) = (" + std::to_string(n) + ", " +
                              std::to_string(info.num_experts) + "), size",
                          sa->size());
  }
  std::vector<std::string> request_names;
  if (names) {
    request_names = std::move(*names);
    if (n > 0 && request_names.size() <= max_request) {
      detail::throw_invalid(fn,
                            "request_names must name every request (the largest request index is " +
                                std::to_string(max_request) + "), size",
                            request_names.size());
    }
  } else {
    const std::uint32_t count = n == 0 ? 0 : max_request + 1;
    for (std::uint32_t r = 0; r < count; ++r) request_names.push_back("request-" + std::to_string(r));
  }

  maybe_release unlock(n * k);
  if (position.empty() && n > 0) {
    // Default positions: the order of the rows within each (request, step, layer).
    position.resize(n);
    std::map<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>, std::uint32_t> next;
    for (std::size_t i = 0; i < n; ++i) position[i] = next[{request[i], step[i], layer[i]}]++;
  }
  routing_trace_builder builder(info);
  for (auto& name : request_names) builder.add_request(std::move(name));
  std::vector<expert_id> ids(k);
  const float* w = wa.data();
  const float* s = sa ? sa->data() : nullptr;
  const std::size_t E = info.num_experts;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < k; ++j) ids[j] = static_cast<expert_id>(experts[i * k + j]);
    trace_row row{request[i],
                  static_cast<phase>(kind[i]),
                  step[i],
                  position[i],
                  static_cast<layer_id>(layer[i]),
                  ids,
                  std::span<const float>(w + i * k, k),
                  s ? std::span<const float>(s + i * E, E) : std::span<const float>()};
    if (auto why = builder.check(row)) detail::throw_invalid(fn, "row " + std::to_string(i) + ": " + *why);
    builder.add(row);
  }
  return std::move(builder).finish();
}

}  // namespace

void bind_trace(py::module_& m) {
  py::class_<routing_trace>(
      m, "Trace",
      "A validated routing trace, sorted by (request, step, layer, position), stored by column.\n\n"
      "The column properties are read-only numpy views of the trace's memory (no copy); each\n"
      "view keeps the trace alive.")
      .def_property_readonly("model", [](const routing_trace& t) { return t.info().model; })
      .def_property_readonly("source", [](const routing_trace& t) { return t.info().source; })
      .def_property_readonly("num_layers", [](const routing_trace& t) { return t.info().num_layers; })
      .def_property_readonly("num_experts", [](const routing_trace& t) { return t.info().num_experts; })
      .def_property_readonly("top_k", [](const routing_trace& t) { return t.info().top_k; })
      .def_property_readonly("has_scores", [](const routing_trace& t) { return t.info().has_scores; })
      .def_property_readonly("num_rows", &routing_trace::num_rows)
      .def_property_readonly("num_steps", [](const routing_trace& t) { return t.steps().size(); })
      .def_property_readonly("num_batches", [](const routing_trace& t) { return t.batches().size(); })
      .def_property_readonly(
          "request_names",
          [](const routing_trace& t) {
            std::vector<std::string> out;
            for (const auto& r : t.requests()) out.push_back(r.name);
            return out;
          },
          "The requests' names, by request index.")
      .def("__len__", &routing_trace::num_rows)
      .def("__repr__",
           [](const routing_trace& t) {
             return "<moepolicy.Trace " + t.info().model + ": " + std::to_string(t.num_rows()) + " rows, " +
                    std::to_string(t.info().num_layers) + " layers x " + std::to_string(t.info().num_experts) +
                    " experts, top-" + std::to_string(t.info().top_k) + ">";
           })
      .def_property_readonly(
          "request",
          [](py::object self) {
            const auto& c = self.cast<const routing_trace&>().columns();
            return column_view(c.request.data(), c.request.size(), 1, false, self);
          },
          "Request index of each row (uint32, read-only view).")
      .def_property_readonly(
          "step",
          [](py::object self) {
            const auto& c = self.cast<const routing_trace&>().columns();
            return column_view(c.step.data(), c.step.size(), 1, false, self);
          },
          "Forward pass of each row within its request (uint32, read-only view).")
      .def_property_readonly(
          "position",
          [](py::object self) {
            const auto& c = self.cast<const routing_trace&>().columns();
            return column_view(c.position.data(), c.position.size(), 1, false, self);
          },
          "Token position of each row (uint32, read-only view).")
      .def_property_readonly(
          "layer",
          [](py::object self) {
            const auto& c = self.cast<const routing_trace&>().columns();
            return column_view(c.layer.data(), c.layer.size(), 1, false, self);
          },
          "MoE layer of each row (uint16, read-only view).")
      .def_property_readonly(
          "phase",
          [](py::object self) {
            const auto& c = self.cast<const routing_trace&>().columns();
            static_assert(sizeof(phase) == 1);
            return column_view(reinterpret_cast<const std::uint8_t*>(c.kind.data()), c.kind.size(), 1, false, self);
          },
          "Phase of each row: 0 prefill, 1 decode (uint8, read-only view).")
      .def_property_readonly(
          "experts",
          [](py::object self) {
            const auto& t = self.cast<const routing_trace&>();
            const auto& c = t.columns();
            return column_view(c.experts.data(), t.num_rows(), t.info().top_k, true, self);
          },
          "Top-k expert ids, rows x top_k (uint16, read-only view).")
      .def_property_readonly(
          "weights",
          [](py::object self) {
            const auto& t = self.cast<const routing_trace&>();
            const auto& c = t.columns();
            return column_view(c.weights.data(), t.num_rows(), t.info().top_k, true, self);
          },
          "Gate weights, rows x top_k (float32, read-only view).")
      .def_property_readonly(
          "scores",
          [](py::object self) {
            const auto& t = self.cast<const routing_trace&>();
            const auto& c = t.columns();
            return column_view(c.scores.data(), t.num_rows(), t.info().has_scores ? t.info().num_experts : 0, true,
                               self);
          },
          "All router scores, rows x num_experts (float32, read-only view); rows x 0 without scores.")
      .def(
          "batches",
          [](const routing_trace& t) {
            const auto b = t.batches();
            const auto n = static_cast<py::ssize_t>(b.size());
            std::vector<std::uint32_t> request(b.size()), step(b.size()), first(b.size()), rows(b.size());
            std::vector<std::uint16_t> layer(b.size());
            std::vector<std::uint8_t> kind(b.size());
            for (std::size_t i = 0; i < b.size(); ++i) {
              request[i] = b[i].request, step[i] = b[i].step, layer[i] = b[i].layer;
              kind[i] = static_cast<std::uint8_t>(b[i].kind), first[i] = b[i].first_row, rows[i] = b[i].num_rows;
            }
            py::dict d;
            d["request"] = adopt(std::move(request), {n});
            d["step"] = adopt(std::move(step), {n});
            d["layer"] = adopt(std::move(layer), {n});
            d["phase"] = adopt(std::move(kind), {n});
            d["first_row"] = adopt(std::move(first), {n});
            d["num_rows"] = adopt(std::move(rows), {n});
            return d;
          },
          "The batches (the rows of one layer of one forward pass) in replay order: request, step, layer,\n"
          "phase, first_row and num_rows arrays. Rows first_row .. first_row + num_rows - 1 of the columns are\n"
          "what one ExpertCache.access takes.")
      .def(
          "steps",
          [](const routing_trace& t) {
            const auto s = t.steps();
            const auto n = static_cast<py::ssize_t>(s.size());
            std::vector<std::uint32_t> request(s.size()), step(s.size()), first(s.size()), count(s.size());
            std::vector<std::uint8_t> kind(s.size());
            for (std::size_t i = 0; i < s.size(); ++i) {
              request[i] = s[i].request, step[i] = s[i].step, kind[i] = static_cast<std::uint8_t>(s[i].kind);
              first[i] = s[i].first_batch, count[i] = s[i].num_batches;
            }
            py::dict d;
            d["request"] = adopt(std::move(request), {n});
            d["step"] = adopt(std::move(step), {n});
            d["phase"] = adopt(std::move(kind), {n});
            d["first_batch"] = adopt(std::move(first), {n});
            d["num_batches"] = adopt(std::move(count), {n});
            return d;
          },
          "The forward passes by request then step: request, step, phase, first_batch and num_batches arrays\n"
          "(indices into batches()).")
      .def_static(
          "from_arrays",
          [](py::handle experts, py::handle weights, py::handle layer, py::handle step, py::handle request,
             py::handle phase_codes, py::handle position, py::handle scores, std::optional<std::uint32_t> num_layers,
             std::optional<std::uint32_t> num_experts, std::optional<std::vector<std::string>> request_names,
             std::string model, std::string source) {
            return from_arrays(experts, weights, layer, step, request, phase_codes, position, scores, num_layers,
                               num_experts, std::move(request_names), std::move(model), std::move(source));
          },
          py::arg("experts"), py::arg("weights"), py::arg("layer"), py::arg("step"), py::arg("request"),
          py::arg("phase"), py::kw_only(), py::arg("position") = py::none(), py::arg("scores") = py::none(),
          py::arg("num_layers") = py::none(), py::arg("num_experts") = py::none(),
          py::arg("request_names") = py::none(), py::arg("model") = "", py::arg("source") = "python",
          "Builds a trace from arrays: experts and weights (rows x top_k), layer, step, request and phase\n"
          "(0 prefill, 1 decode) per row; optional positions (default: the order of the rows within each\n"
          "(request, step, layer)), scores (rows x num_experts), dimensions (default: the largest id + 1)\n"
          "and request names. Rows may come in any order; every row is validated (ValueError naming it).")
      .def(
          "write_canonical",
          [](const routing_trace& t, const std::filesystem::path& path) {
            py::gil_scoped_release unlock;
            write_canonical(t, path);
          },
          py::arg("path"), "Writes the trace in the canonical .mtrace format, replacing `path` atomically.");

  m.def(
      "read_trace",
      [](py::object paths) {
        if (py::isinstance<py::str>(paths) || py::hasattr(paths, "__fspath__")) {
          auto p = paths.cast<std::filesystem::path>();
          py::gil_scoped_release unlock;
          return io::read_trace(p);
        }
        auto list = paths.cast<std::vector<std::filesystem::path>>();
        py::gil_scoped_release unlock;
        return io::read_trace(std::span<const std::filesystem::path>(list));
      },
      py::arg("path"),
      "Reads a trace with the importer its content calls for: a canonical .mtrace, a Granite, vLLM or\n"
      "WARP routing .jsonl, a FLAME-MoE prefill_layer<L>.csv or a directory of either; or a list of\n"
      "Granite .jsonl files read as one trace. Raises ParseError naming the file and line or offset.");
  m.def(
      "detect_trace_format",
      [](const std::filesystem::path& path) { return std::string(io::to_string(io::detect_trace_format(path))); },
      py::arg("path"), "The name of the format read_trace would read `path` as.");
  m.def(
      "write_canonical",
      [](const routing_trace& t, const std::filesystem::path& path) {
        py::gil_scoped_release unlock;
        write_canonical(t, path);
      },
      py::arg("trace"), py::arg("path"),
      "Writes `trace` in the canonical .mtrace format, replacing `path` atomically.");
}

}  // namespace moepolicy::python
