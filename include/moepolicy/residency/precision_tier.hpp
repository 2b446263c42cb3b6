// moepolicy/residency/precision_tier.hpp — the vocabulary shared by DynaExq's policy and
// mechanism (DynaExq, "Dynamic Expert Quantization for Scalable Mixture-of-Experts
// Inference", §3 and §3.2).
//
// Each expert keeps two versions, a low-precision one (bitwidth b_lo) and a high-precision
// one (b_hi) (§3). What happens to the low version while the high one is resident is not
// fixed by the paper's text, which supports two readings; both are offered, because both
// are deployed in practice:
//
//   low_version::replaced  the high version *replaces* the low one (§3.2, "Demoting: the
//                          system is transferring the low-precision version to the GPU to
//                          replace the current high-precision version"). A resident expert
//                          costs s_hi or s_lo; a demotion copies the low version back in.
//   low_version::kept      the low version stays resident as the "low-precision fallback"
//                          (abstract, §3.2 "eviction proceeds by first redirecting the handle
//                          to a still-resident version"); a high version costs s_hi on top,
//                          and a demotion is a switch plus a reclamation, with no copy.
//
// The budget planner (predict/precision_budget.hpp) and the residency mechanism
// (residency/versioned_expert.hpp, residency/transition_queue.hpp) take the same choice.
#pragma once

#include <cstdint>
#include <string_view>

namespace moepolicy {

/// Which of an expert's two versions.
enum class precision_tier : std::uint8_t { low = 0, high = 1 };

/// Whether an expert's low-precision version stays resident beside its high one.
enum class low_version : std::uint8_t { replaced = 0, kept = 1 };

/// "low" or "high".
[[nodiscard]] constexpr std::string_view to_string(precision_tier t) noexcept {
  return t == precision_tier::high ? "high" : "low";
}

/// "replaced" or "kept".
[[nodiscard]] constexpr std::string_view to_string(low_version v) noexcept {
  return v == low_version::kept ? "kept" : "replaced";
}

}  // namespace moepolicy
