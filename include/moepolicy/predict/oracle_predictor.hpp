// moepolicy/predict/oracle_predictor.hpp — the perfect predictor: it reads the trace's own
// future. Models `PrefetchPredictor`; the bound every predictor is compared with.
//
// `predict(l, out)` scores 1 every expert that one of the next `horizon` batches of layer l
// selects — batches after the last one observed, of the same request and of the phases the
// configuration keeps — and 0 the others. Observed batches must come from the trace the
// oracle was built on (it finds its place by the batch's first row), in trace order.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/predict/prefetch_queue.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// Configuration of `oracle_predictor`.
struct oracle_config {
  /// Batches of a layer the prediction covers, >= 1.
  std::uint32_t horizon = 1;
  /// Which phases' batches count as the future (the others are skipped over).
  bool prefill = true;
  bool decode = true;
};

/// Predicts exactly what the trace does next.
class oracle_predictor {
 public:
  /// Keeps a reference to `trace`, which must outlive the predictor.
  ///
  /// Throws: `invalid_argument` when `cfg.horizon` is 0 or no phase is kept.
  oracle_predictor(const routing_trace& trace, const oracle_config& cfg = {}) : trace_(&trace), cfg_(cfg) {
    if (cfg.horizon == 0) detail::throw_invalid("oracle_predictor", "horizon must be >= 1", cfg.horizon);
    if (!cfg.prefill && !cfg.decode) detail::throw_invalid("oracle_predictor", "keep prefill, decode or both");
  }

  [[nodiscard]] const oracle_config& config() const noexcept { return cfg_; }

  /// See `PrefetchPredictor`. Complexity: O(batches scanned + horizon · tokens · k).
  bool predict(layer_id l, std::span<float> out) noexcept {
    MOEPOLICY_ASSERT(out.size() == trace_->info().num_experts);
    std::fill(out.begin(), out.end(), 0.0f);
    const auto batches = trace_->batches();
    std::size_t found = 0;
    bool any = false;
    for (std::size_t i = cursor_; i < batches.size() && found < cfg_.horizon; ++i) {
      const batch_ref& b = batches[i];
      if (started_ && b.request != request_) break;
      if (b.layer != l || !kept(b.kind)) continue;
      ++found;
      for (expert_id e : trace_->view(b).experts) {
        out[e] = 1.0f;
        any = true;
      }
    }
    return any;
  }

  /// See `PrefetchPredictor`. Complexity: O(log batches).
  void observe(const batch_view& b) noexcept {
    const auto batches = trace_->batches();
    const auto it = std::lower_bound(batches.begin(), batches.end(), b.ref.first_row,
                                     [](const batch_ref& r, std::uint32_t row) { return r.first_row < row; });
    MOEPOLICY_ASSERT(it != batches.end() && it->first_row == b.ref.first_row);
    cursor_ = static_cast<std::size_t>(it - batches.begin()) + 1;
    request_ = b.ref.request;
    started_ = true;
  }

  /// Nothing to do: the future is read from the trace.
  void end_step() noexcept {}
  /// Nothing to do: the request is known from the next observed batch.
  void begin_request() noexcept { started_ = false; }

 private:
  [[nodiscard]] bool kept(phase p) const noexcept { return p == phase::prefill ? cfg_.prefill : cfg_.decode; }

  const routing_trace* trace_;
  oracle_config cfg_;
  std::size_t cursor_ = 0;
  std::uint32_t request_ = 0;
  bool started_ = false;
};

static_assert(PrefetchPredictor<oracle_predictor>);

}  // namespace moepolicy
