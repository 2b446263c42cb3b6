// A consumer of the io component: writes a two-row trace in the canonical format, reads it
// back, and tells a WARP routing record from a vLLM one.
#include <moepolicy/io/jsonl_format.hpp>
#include <moepolicy/trace/canonical.hpp>

#include <array>
#include <cstdio>
#include <sstream>

int main() {
  using namespace moepolicy;
  routing_trace_builder b(trace_info{"consumer", "consumer", 1, 4, 2, false});
  const std::uint32_t r = b.add_request("r");
  const std::array<expert_id, 2> ids{0, 3};
  const std::array<float, 2> w{0.6f, 0.4f};
  b.add(trace_row{r, phase::decode, 1, 1, 0, ids, w, {}});
  b.add(trace_row{r, phase::decode, 2, 2, 0, ids, w, {}});
  const routing_trace t = std::move(b).finish();
  std::stringstream s;
  write_canonical(t, s);
  const routing_trace back = read_canonical(s, "consumer");
  const bool warp = io::detect_jsonl_format(R"({"tok": 1, "layers": [[0, 1]]})") == io::jsonl_format::warp;
  std::printf("consumer io ok: %zu rows round-trip, warp detected: %s\n", back.num_rows(), warp ? "yes" : "no");
  return back.num_rows() == 2 && warp ? 0 : 1;
}
