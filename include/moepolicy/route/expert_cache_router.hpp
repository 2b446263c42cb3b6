// moepolicy/route/expert_cache_router.hpp — the expert-cache router (Edge-MoE, "Enabling MoE
// on the Edge via Importance-Driven Expert Scheduling", §5.1 and Alg. 1, with the
// batch-aware preference of §5.4).
//
// For each token t of a batch, with router scores S_t over all experts and the token's
// top-k selection:
//   β = the (k+1)-th score of S_t (the highest score of an expert the token did not select)
//   T = (1 + α)β,  L = β,  R = (1 − α)β
//   top-score experts: selected with s > T; they stay, and their union over the batch is
//     the top-score set C (Alg. 1 lines 2–9, a first pass over every token);
//   low-score experts: selected with s <= T. One that is GPU-resident or in C stays
//     (§5.1: "if they are already in GPU memory or part of the top-score expert set, they
//     are retained"); the m others are to be replaced;
//   alternatives A_t: experts the token did not select with R <= s <= L that are resident
//     or in C (Alg. 1 line 14);
//   if |A_t| >= m the m highest-scoring alternatives replace the m low-score experts;
//     otherwise all of A_t replace the |A_t| lowest-scoring of them and the other
//     m − |A_t| stay, to be loaded or computed on the CPU (lines 18–23).
// The token keeps k experts: a replacement takes the replaced expert's slot, with the
// alternative's router score as its weight.
//
// With `prefer_batch_shared` (§5.4: "we prioritize the replacement of low-score experts
// with alternative experts that have larger batch sizes"), an alternative may also be an
// expert another token of the batch selected (its computation is paid for anyway, its
// weights loaded once), and alternatives rank by that batch size — the number of tokens of
// the batch that selected it in the router's output — before score.
//
// Readings of the text, where it leaves room (each pinned by a test):
//   - Alg. 1 line 13 read literally (L <= s < T over *all* experts) would put the
//     (k+1)-th expert itself (s = β = L) among the low-score experts B_t and could give a
//     token k+1 experts, and line 6/13 leave a selected expert with s = T in neither set.
//     The sets are therefore drawn by selection: B_t from the token's top-k with s <= T,
//     A_t from the experts it did not select, with R <= s <= L — the (k+1)-th expert is
//     the first alternative ("an inactive expert whose score falls between (1 − α)β and
//     β", §5.1), which the strict s < L of line 14 would exclude.
//   - Ties rank by the lower expert id; replaced experts are taken lowest score first.
//   - Scores must be non-negative (softmax probabilities). A token whose β is 0 — no
//     unselected expert scores anything — keeps its routing: there is nothing to
//     substitute with.
//   - Traces without full router scores: the Granite and Mixtral traces hold only the
//     top-k gate weights (renormalised), so the (k+1)-th score is unknown. The router then
//     takes the gate weights as the selected experts' scores and 0 for every other expert,
//     so β = 0 and every token keeps its routing (`route_result::full_scores` is false).
//     The FLAME-MoE CSV traces carry a full probability vector per token
//     (`trace_info::has_scores`), but it is zero outside the top-k, so β = 0 there too:
//     no recorded trace in the project exercises a substitution; the tests use
//     hand-worked scores.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// Configuration of `expert_cache_router`.
struct router_config {
  /// Routed experts per layer, in [2, 65536].
  std::uint32_t num_experts = 0;
  /// Experts per token, in [1, num_experts − 1] (β is the (k+1)-th score).
  std::uint32_t top_k = 0;
  /// The substitution threshold α in [0, 1]; 0 keeps every routing. The paper runs 0.35,
  /// 0.3 and 0.25 on its three settings (§6.2).
  double alpha = 0.3;
  /// §5.4: alternatives may be experts other tokens of the batch selected, and larger
  /// batch sizes rank first.
  bool prefer_batch_shared = false;
};

/// What one `route` call did.
struct route_result {
  std::size_t tokens = 0;
  /// tokens × k = top_score + low_score + unscored.
  std::size_t selections = 0;
  /// Selections with s > T.
  std::size_t top_score = 0;
  /// Selections with s <= T = low_kept_resident + substituted + unreplaced.
  std::size_t low_score = 0;
  /// Selections of tokens whose β is 0 (no unselected expert scores anything, as in
  /// traces without full scores): kept, neither top- nor low-score (those with s > 0 =
  /// T still join C, as Alg. 1 line 6 says: they are computed anyway).
  std::size_t unscored = 0;
  /// Low-score selections that stayed because resident or in C.
  std::size_t low_kept_resident = 0;
  /// Low-score selections replaced by an alternative.
  std::size_t substituted = 0;
  /// Low-score selections that stayed for want of alternatives (to load or run on CPU).
  std::size_t unreplaced = 0;
  /// Σ over tokens of the scores of the original top-k, of the routed experts, and of the
  /// original experts that stayed.
  double original_mass = 0.0;
  double routed_mass = 0.0;
  double kept_mass = 0.0;
  /// Whether the batch carried every expert's score (else unselected experts counted 0).
  bool full_scores = true;

  /// routed / original score mass: the routing-weight mass the output keeps, substitutes'
  /// scores included (1 when nothing was routed).
  [[nodiscard]] double mass_preserved() const noexcept {
    return original_mass > 0.0 ? routed_mass / original_mass : 1.0;
  }
  /// kept / original: the share of the original mass left on the original experts.
  [[nodiscard]] double kept_fraction() const noexcept {
    return original_mass > 0.0 ? kept_mass / original_mass : 1.0;
  }
};

/// The expert-cache router of Edge-MoE Alg. 1.
class expert_cache_router {
 public:
  /// Throws: `invalid_argument` when `num_experts` is outside [2, 65536], `top_k` outside
  /// [1, num_experts − 1], or `alpha` outside [0, 1].
  explicit expert_cache_router(const router_config& cfg) : cfg_(checked(cfg)) {
    const std::size_t E = cfg_.num_experts;
    in_c_.assign(E, 0);
    selected_.assign(E, 0);
    batch_load_.assign(E, 0);
    alternatives_.reserve(E);
    replace_.reserve(cfg_.top_k);
    token_scores_.assign(E, 0.0f);
    beta_.assign(kept_betas, 0.0);
  }

  [[nodiscard]] const router_config& config() const noexcept { return cfg_; }

  /// Routes one batch of one layer: `ids` and `weights` hold the router's top-k (`tokens ×
  /// k`, row-major), `scores` every expert's score (`tokens × num_experts`) or nothing;
  /// `resident(e)` says whether expert `e` of the layer is GPU-resident. Writes each
  /// token's k routed experts and their weights (router scores; the input gate weights
  /// when the batch has no scores) to `out_ids` and `out_weights`, which may alias `ids`
  /// and `weights`.
  ///
  /// Preconditions: `ids.size() == weights.size() == out_ids.size() == out_weights.size()`,
  /// a multiple of `top_k`; ids below `num_experts`, distinct within a token; `scores`
  /// empty or `tokens × num_experts`, non-negative.
  /// Complexity: O(tokens · (num_experts + k log k)) plus sorting each token's
  /// alternatives; no allocation.
  template <class Resident>
  route_result route(std::span<const expert_id> ids, std::span<const float> weights, std::span<const float> scores,
                     Resident&& resident, std::span<expert_id> out_ids, std::span<float> out_weights) noexcept {
    const std::size_t k = cfg_.top_k;
    const std::size_t E = cfg_.num_experts;
    MOEPOLICY_ASSERT(ids.size() == weights.size() && ids.size() % k == 0);
    MOEPOLICY_ASSERT(out_ids.size() == ids.size() && out_weights.size() == ids.size());
    const std::size_t tokens = ids.size() / k;
    MOEPOLICY_ASSERT(scores.empty() || scores.size() == tokens * E);
    const double alpha = cfg_.alpha;

    route_result r;
    r.tokens = tokens;
    r.selections = ids.size();
    r.full_scores = !scores.empty();

    // Without scores every unselected expert scores 0, so every token's β is 0 and it keeps
    // its routing (see the header): the passes below would copy the batch and count its
    // mass, which this does directly, adding in the same order.
    if (scores.empty()) {
      for (std::size_t i = 0; i < ids.size(); ++i) {
        MOEPOLICY_ASSERT(ids[i] < E);
        const double w = static_cast<double>(weights[i]);
        out_ids[i] = ids[i];
        out_weights[i] = weights[i];
        r.original_mass += w;
        r.routed_mass += w;
        r.kept_mass += w;
      }
      r.unscored = ids.size();
      return r;
    }

    // Pass 1 (Alg. 1 lines 2–9): the top-score set C over the whole batch, and how many
    // tokens select each expert (for §5.4).
    std::fill(in_c_.begin(), in_c_.end(), std::uint8_t{0});
    std::fill(batch_load_.begin(), batch_load_.end(), 0u);
    for (std::size_t t = 0; t < tokens; ++t) {
      const auto row = ids.subspan(t * k, k);
      const std::span<const float> s = token(t, row, weights.subspan(t * k, k), scores);
      const double beta = beta_of(row, s);
      if (t < beta_.size()) beta_[t] = beta;
      const double T = (1.0 + alpha) * beta;
      for (std::size_t j = 0; j < k; ++j) {
        MOEPOLICY_ASSERT(row[j] < E);
        ++batch_load_[row[j]];
        if (static_cast<double>(s[row[j]]) > T) in_c_[row[j]] = 1;
      }
    }

    // Pass 2 (lines 10–24): each token's low-score experts and their alternatives.
    for (std::size_t t = 0; t < tokens; ++t) {
      // Copy the row first: the output may alias the input.
      expert_id row[max_top_k];
      const auto in_row = ids.subspan(t * k, k);
      std::copy(in_row.begin(), in_row.end(), row);
      const std::span<const expert_id> sel(row, k);
      const std::span<const float> s = token(t, sel, weights.subspan(t * k, k), scores);
      const double beta = t < beta_.size() ? beta_[t] : beta_of(sel, s);
      const double T = (1.0 + alpha) * beta;
      const double R = (1.0 - alpha) * beta;

      expert_id* out = out_ids.data() + t * k;
      float* out_w = out_weights.data() + t * k;
      replace_.clear();
      for (std::size_t j = 0; j < k; ++j) {
        const expert_id e = row[j];
        const double se = static_cast<double>(s[e]);
        out[j] = e;
        out_w[j] = s[e];
        r.original_mass += se;
        if (beta <= 0.0) {
          ++r.unscored;
          continue;
        }
        if (se > T) {
          ++r.top_score;
          continue;
        }
        ++r.low_score;
        if (resident(e) || in_c_[e] != 0) {
          ++r.low_kept_resident;
        } else {
          replace_.push_back(j);
        }
      }
      if (!replace_.empty()) {
        for (expert_id e : sel) selected_[e] = 1;
        alternatives_.clear();
        for (std::size_t f = 0; f < E; ++f) {
          if (selected_[f] != 0) continue;
          const double sf = static_cast<double>(s[f]);
          if (!(sf >= R && sf <= beta)) continue;
          const auto e = static_cast<expert_id>(f);
          const bool eligible =
              resident(e) || in_c_[f] != 0 || (cfg_.prefer_batch_shared && batch_load_[f] > 0);
          if (eligible) alternatives_.push_back(e);
        }
        for (expert_id e : sel) selected_[e] = 0;

        const std::size_t m = replace_.size();
        const std::size_t n = std::min(m, alternatives_.size());
        const auto better = [&](expert_id a, expert_id b) {
          if (cfg_.prefer_batch_shared && batch_load_[a] != batch_load_[b]) return batch_load_[a] > batch_load_[b];
          if (s[a] != s[b]) return s[a] > s[b];
          return a < b;
        };
        std::partial_sort(alternatives_.begin(), alternatives_.begin() + static_cast<std::ptrdiff_t>(n),
                          alternatives_.end(), better);
        // The lowest-scoring low-score experts go first (Alg. 1 line 22 keeps the top ones).
        std::sort(replace_.begin(), replace_.end(), [&](std::size_t a, std::size_t b) {
          if (s[row[a]] != s[row[b]]) return s[row[a]] < s[row[b]];
          return row[a] < row[b];
        });
        for (std::size_t i = 0; i < n; ++i) {
          out[replace_[i]] = alternatives_[i];
          out_w[replace_[i]] = s[alternatives_[i]];
        }
        r.substituted += n;
        r.unreplaced += m - n;
      }
      for (std::size_t j = 0; j < k; ++j) {
        r.routed_mass += static_cast<double>(out_w[j]);
        if (out[j] == row[j]) r.kept_mass += static_cast<double>(out_w[j]);
      }
    }
    return r;
  }

  /// Routes a batch of a trace; see the span overload. `b.top_k` must equal `top_k`.
  template <class Resident>
  route_result route(const batch_view& b, Resident&& resident, std::span<expert_id> out_ids,
                     std::span<float> out_weights) noexcept {
    MOEPOLICY_ASSERT(b.top_k == cfg_.top_k);
    return route(b.experts, b.weights, b.scores, resident, out_ids, out_weights);
  }

  /// The most experts per token the router takes.
  static constexpr std::uint32_t max_top_k = 64;

 private:
  static router_config checked(const router_config& c) {
    constexpr const char* fn = "expert_cache_router";
    if (c.num_experts < 2 || c.num_experts > 65536) {
      detail::throw_invalid(fn, "num_experts must be in [2, 65536]", c.num_experts);
    }
    if (c.top_k == 0 || c.top_k >= c.num_experts || c.top_k > max_top_k) {
      detail::throw_invalid(fn, "top_k must be in [1, min(num_experts - 1, 64)]", c.top_k);
    }
    if (!(c.alpha >= 0.0 && c.alpha <= 1.0)) detail::throw_invalid(fn, "alpha must be in [0, 1]", c.alpha);
    return c;
  }

  /// The scores of token `t`: its row of `scores`, or the gate weights of its selection
  /// with 0 elsewhere when the batch has no scores.
  std::span<const float> token(std::size_t t, std::span<const expert_id> sel, std::span<const float> w,
                               std::span<const float> scores) noexcept {
    const std::size_t E = cfg_.num_experts;
    if (!scores.empty()) return scores.subspan(t * E, E);
    std::fill(token_scores_.begin(), token_scores_.end(), 0.0f);
    for (std::size_t j = 0; j < sel.size(); ++j) token_scores_[sel[j]] = w[j];
    return token_scores_;
  }

  /// β: the highest score among the experts the token did not select (there is one:
  /// k < E). Written without branches on the data, so that it compiles to selects.
  double beta_of(std::span<const expert_id> sel, std::span<const float> s) noexcept {
    for (expert_id e : sel) selected_[e] = 1;
    float beta = -std::numeric_limits<float>::infinity();
    for (std::size_t f = 0; f < s.size(); ++f) {
      const float v = selected_[f] != 0 ? -std::numeric_limits<float>::infinity() : s[f];
      beta = v > beta ? v : beta;
    }
    for (expert_id e : sel) selected_[e] = 0;
    return static_cast<double>(beta);
  }

  router_config cfg_;
  std::vector<std::uint8_t> in_c_;
  std::vector<std::uint8_t> selected_;
  std::vector<std::uint32_t> batch_load_;
  std::vector<expert_id> alternatives_;
  std::vector<std::size_t> replace_;
  std::vector<float> token_scores_;
  // β of the first `kept_betas` tokens, from the first pass (later tokens recompute it).
  static constexpr std::size_t kept_betas = 1024;
  std::vector<double> beta_;
};

}  // namespace moepolicy
