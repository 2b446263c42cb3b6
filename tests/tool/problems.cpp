// The problem readers of the moepolicy tool (examples/moepolicy/problems.hpp): every
// number is checked as a number before it becomes an integer, nothing deep is copied or
// printed, and every problem they return is one the solvers take.
#include "problems.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "json_input.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/io/json_document.hpp"
#include "test_support.hpp"

namespace tool = moepolicy::tool;
using moepolicy::parse_error;
using nlohmann::json;

namespace {

json doc(const std::string& text) { return moepolicy::io::parse_json_document(text, "p.json"); }

std::string bitwidth_error(const std::string& text) {
  try {
    static_cast<void>(tool::read_bitwidth_problem(doc(text), "p.json"));
  } catch (const parse_error& e) {
    return e.what();
  }
  return "";
}

std::string place_error(const std::string& text) {
  try {
    static_cast<void>(tool::read_place_problem(doc(text), "p.json"));
  } catch (const parse_error& e) {
    return e.what();
  }
  return "";
}

std::string schedule_error(const std::string& text) {
  try {
    static_cast<void>(tool::read_schedule_problem(doc(text), "p.json"));
  } catch (const parse_error& e) {
    return e.what();
  }
  return "";
}

const std::string losses = R"("losses": [[100, 40, 20, 10], [80, 30, 15, 8]])";
const std::string place_base = R"("counts": [[8, 4, 10], [1, 1, 1]], "weight_sums": [[5, 2, 6], [0.5, 0.4, 0.6]])";

std::filesystem::path problems() { return MOEPOLICY_EXAMPLE_PROBLEMS; }

}  // namespace

TEST_CASE("the example problems read and solve") {
  const auto b = tool::read_bitwidth_problem(tool::load_json((problems() / "bitwidth_layer.json").string()), "b");
  CHECK(tool::solve(b)["prefix_split"]["status"] == "ok");
  const auto p = tool::read_place_problem(tool::load_json((problems() / "place_two_layers.json").string()), "p");
  CHECK(tool::solve(p)["layers"].size() == 2);
  const auto s = tool::read_schedule_problem(tool::load_json((problems() / "schedule_step.json").string()), "s");
  CHECK(tool::solve(s)["schedules"].size() == 3);
}

TEST_CASE("problem JSON nested 100,000 levels is an error naming its line, for every subcommand") {
  // The review's finding: exit 139, a stack overflow while an error message printed the
  // value recursively.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string& text :
       {"{\"bits\":\n" + deep + "}", "{\"counts\":\n" + deep + "}", "{\"model\":\n" + deep + "}"}) {
    CHECK_THROWS_WITH_AS(static_cast<void>(doc(text)),
                         "p.json:2: JSON nested deeper than 64 levels (input_limits::max_json_depth)", parse_error);
  }
  // Within the bound a nested value is described, never printed or copied whole.
  const std::string nested = std::string(60, '[') + std::string(60, ']');
  CHECK(bitwidth_error("{\"bits\": [1], \"average_bits\": " + nested + "}") ==
        "p.json: average_bits: expected a number in [1, 32], got an array of 1");
  CHECK(place_error("{" + place_base + ", \"gpu_experts_per_layer\": {\"a\": " + nested + "}}") ==
        "p.json: gpu_experts_per_layer: expected a whole number in [0, 3], got an object of 1 keys");
  CHECK(schedule_error("{\"model\": " + nested + ", \"experts\": []}") ==
        "p.json: model: expected a model preset name, got an array of 1");
}

TEST_CASE("bitwidth: every number is range-checked as a number before it is converted") {
  // The review's findings: average_bits 1e308 overflowed the budget's conversion (the tool
  // said "infeasible", every bit at 1); bit_set and min_count were converted before their
  // range checks.
  CHECK(bitwidth_error(R"({"bits": [1, 2, 3, 4], "average_bits": 1e308, )" + losses + "}") ==
        "p.json: average_bits: expected a number in [1, 32], got 1e+308");
  CHECK(bitwidth_error(R"({"bits": [1, 2, 3, 4], "average_bits": 0.5, )" + losses + "}") ==
        "p.json: average_bits: expected a number in [1, 32], got 0.5");
  CHECK(bitwidth_error(R"({"bits": [1, 2, 1e308, 4], "average_bits": 2, )" + losses + "}") ==
        "p.json: bits[2]: expected a whole number in [1, 32], got 1e+308");
  CHECK(bitwidth_error(R"({"bits": [1, 2.5, 3, 4], "average_bits": 2, )" + losses + "}") ==
        "p.json: bits[1]: expected a whole number in [1, 32], got 2.5");
  CHECK(bitwidth_error(R"({"bits": [1, -2, 3, 4], "average_bits": 2, )" + losses + "}") ==
        "p.json: bits[1]: expected a whole number in [1, 32], got -2");
  CHECK(bitwidth_error(R"({"bits": [1, 3, 2, 4], "average_bits": 2, )" + losses + "}") ==
        "p.json: bits[2]: expected a bitwidth above 3 (strictly ascending), got 2");
  CHECK(bitwidth_error(R"({"bits": [], "average_bits": 2, )" + losses + "}") ==
        "p.json: bits: expected at least one bitwidth");
  CHECK(bitwidth_error(R"({"bits": [1, 2, 3, 4], "average_bits": 2, "min_count": [0, 1e20, 0, 0], )" + losses + "}") ==
        "p.json: min_count[1]: expected a whole number in [0, 4294967295], got 1e+20");
  CHECK(bitwidth_error(R"({"bits": [1, 2, 3, 4], "average_bits": 2, "min_count": [0, -1, 0, 0], )" + losses + "}") ==
        "p.json: min_count[1]: expected a whole number in [0, 4294967295], got -1");
  CHECK(bitwidth_error(R"({"bits": [1, 2, 3, 4], "average_bits": 2, "min_count": [0, 0.5, 0, 0], )" + losses + "}") ==
        "p.json: min_count[1]: expected a whole number in [0, 4294967295], got 0.5");
  CHECK(bitwidth_error(R"({"bits": [1, 2, 3, 4], "average_bits": 2, "losses": [[1, 2, 3]]})") ==
        "p.json: losses[0]: expected 4 numbers, got 3");
  CHECK(bitwidth_error(R"({"bits": [1, 2, 3, 4], "average_bits": 2, "losses": [[1, 2, 3, 1e101]]})") ==
        "p.json: losses[0][3]: expected a number in [-1e100, 1e100], got 1e+101");
  CHECK(bitwidth_error(R"({"bits": [1, 2, 3, 4], "average_bits": 2, "weights": [1, -1], )" + losses + "}") ==
        "p.json: weights[1]: expected a number in [0, 1e100], got -1");
  CHECK(bitwidth_error(R"({"bits": [1, 2, 3, 4], "average_bits": 2, "weights": [1], )" + losses + "}") ==
        "p.json: weights: expected one weight per expert (2), got 1");
  CHECK(bitwidth_error(R"({"bits": [1, 2, 3, 4], "average_bits": 2, "form": ["exact"], )" + losses + "}") ==
        "p.json: form: expected \"exact\" or \"at_most\", got an array of 1");
  CHECK(bitwidth_error(R"({"bits": [1, 2, 3, 4], "average_bits": 2, "solver": "fast", )" + losses + "}") ==
        "p.json: solver: expected \"prefix_split\", \"exact\" or \"both\", got \"fast\"");
  CHECK(bitwidth_error(R"({"bits": [1, 2, 3, 4], "average_bits": 2})") == "p.json: losses: missing");
  CHECK(bitwidth_error("[1]") == "p.json: problem: expected an object, got an array of 1");
  // At the edges: a whole float, 32 bits, the largest average.
  CHECK(bitwidth_error(R"({"bits": [1.0, 32], "average_bits": 32, "losses": [[2, 1]]})").empty());
  const auto p = tool::read_bitwidth_problem(doc(R"({"bits": [1, 2, 3, 4], "average_bits": 32, )" + losses + "}"), "p");
  CHECK(tool::solve(p)["exact"]["status"] == "saturated");
}

TEST_CASE("place: every number is range-checked as a number before it is converted") {
  // The review's finding: gpu_experts_per_layer 2.7 put 2 experts on the GPU, 1e308 none.
  const std::string uniform = R"(, "uniform_bits": 3})";
  CHECK(place_error("{" + place_base + R"(, "gpu_experts_per_layer": 2.7)" + uniform) ==
        "p.json: gpu_experts_per_layer: expected a whole number in [0, 3], got 2.7");
  CHECK(place_error("{" + place_base + R"(, "gpu_experts_per_layer": 1e308)" + uniform) ==
        "p.json: gpu_experts_per_layer: expected a whole number in [0, 3], got 1e+308");
  CHECK(place_error("{" + place_base + R"(, "gpu_experts_per_layer": 4)" + uniform) ==
        "p.json: gpu_experts_per_layer: expected a whole number in [0, 3], got 4");
  CHECK(place_error("{" + place_base + R"(, "gpu_experts_per_layer": -1)" + uniform) ==
        "p.json: gpu_experts_per_layer: expected a whole number in [0, 3], got -1");
  CHECK(place_error("{" + place_base + R"(, "gpu_experts_per_layer": 2, "uniform_bits": 1e308})") ==
        "p.json: uniform_bits: expected a whole number in [1, 32], got 1e+308");
  CHECK(place_error("{" + place_base + R"(, "gpu_experts_per_layer": 2, "alpha": 2)" + uniform) ==
        "p.json: alpha: expected a number in [0, 1], got 2");
  CHECK(place_error(R"({"counts": [[1, -2]], "weight_sums": [[1, 2]], "gpu_experts_per_layer": 1)" + uniform) ==
        "p.json: counts[0][1]: expected a number in [0, 1e100], got -2");
  CHECK(place_error(R"({"counts": [[1, 2]], "weight_sums": [[1, 2], [3, 4]], "gpu_experts_per_layer": 1)" + uniform) ==
        "p.json: weight_sums: expected 1 rows (as counts), got 2");
  CHECK(place_error(R"({"counts": [], "weight_sums": [], "gpu_experts_per_layer": 0)" + uniform) ==
        "p.json: counts: expected at least one layer");
  const std::string with_losses = "{" + place_base + R"(, "gpu_experts_per_layer": 1, "ndp_average_bits": )";
  const std::string table = R"(, "losses": {"bits": [1, 2], "table": [[[3, 1], [3, 1], [3, 1]], [[3, 1], [3, 1], [3, 1]]]}})";
  CHECK(place_error(with_losses + "1e308" + table) ==
        "p.json: ndp_average_bits: expected a number in [1, 32], got 1e+308");
  CHECK(place_error(with_losses + "1.5" + table).empty());
  CHECK(place_error(with_losses + R"(1.5, "losses": {"bits": [1, 2], "table": [[[3, 1], [3, 1], [3, 1]]]}})") ==
        "p.json: losses.table: expected 2 layers (as counts), got 1");
  CHECK(place_error(with_losses + R"(1.5, "losses": {"bits": [1, 2], "table": [[[3, 1]], [[3, 1]]]}})") ==
        "p.json: losses.table[0]: expected 3 experts (as counts), got 1");
  CHECK(place_error(with_losses + R"(1.5, "losses": {"bits": [2, 1], "table": []}})") ==
        "p.json: losses.bits[1]: expected a bitwidth above 2 (strictly ascending), got 1");
  const auto p = tool::read_place_problem(doc("{" + place_base + R"(, "gpu_experts_per_layer": 3.0)" + uniform), "p");
  CHECK(p.config.gpu_experts_per_layer == 3);
  CHECK(tool::solve(p)["layers"][0]["gpu"].size() == 3);
}

TEST_CASE("schedule: every number is range-checked as a number before it is converted") {
  const std::string head = R"({"model": "Mixtral-8x7B", "experts": [)";
  CHECK(schedule_error(head + R"({"layer": 1e308, "expert": 0, "tokens": 1}]})") ==
        "p.json: experts[0].layer: expected a whole number in [0, 31], got 1e+308");
  CHECK(schedule_error(head + R"({"layer": 0, "expert": 0, "tokens": 1e10}]})") ==
        "p.json: experts[0].tokens: expected a whole number in [1, 4294967295], got 10000000000.0");
  CHECK(schedule_error(head + R"({"layer": 0, "expert": 0, "tokens": 1, "layout": 2.5}]})") ==
        "p.json: experts[0].layout: expected a whole number in [0, 15], got 2.5");
  CHECK(schedule_error(head + R"({"layer": 0, "expert": 0, "tokens": 1, "layout": "\u001b[2J"}]})") ==
        "p.json: experts[0].layout: expected \"striped\" or a DIMM index, got \"\\u001b[2J\"");
  CHECK(schedule_error(R"({"model": "Mixtral-8x7B", "num_dimms": -1, "experts": []})") ==
        "p.json: num_dimms: expected a whole number in [1, 65534], got -1");
  CHECK(schedule_error(R"({"model": "Mixtral-8x7B", "max_iterations": 1e308, "experts": []})") ==
        "p.json: max_iterations: expected a whole number in [0, 1000000000], got 1e+308");
  CHECK(schedule_error(R"({"model": ")" + std::string(100, 'x') + R"(", "experts": []})")
            .starts_with("p.json: model: unknown preset \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...\" (known: "));
  CHECK(schedule_error(head + R"({"layer": 0, "expert": 7, "tokens": 3.0, "layout": 15}]})").empty());
}

namespace {

std::string balance_error(const std::string& text) {
  try {
    static_cast<void>(tool::read_balance_problem(doc(text), "p.json"));
  } catch (const parse_error& e) {
    return e.what();
  }
  return "";
}

std::filesystem::path machines() { return std::filesystem::path(MOEPOLICY_EXAMPLE_PROBLEMS) / ".." / "machines"; }

}  // namespace

TEST_CASE("an unknown key is an error naming it and where, in every problem") {
  CHECK(bitwidth_error(R"({"bits": [1, 2, 3, 4], "average_bits": 2, )" + losses + R"(, "solvr": "exact"})") ==
        "p.json: solvr: unknown key (allowed here: bits, average_bits, losses, weights, form, rounding, min_count, "
        "solver)");
  CHECK(place_error("{" + place_base + R"(, "gpu_experts_per_layer": 1, "uniform_bits": 3, "alpah": 0.2})") ==
        "p.json: alpah: unknown key (allowed here: counts, weight_sums, gpu_experts_per_layer, alpha, normalization, "
        "ndp_average_bits, losses, uniform_bits, form, rounding)");
  CHECK(
      place_error("{" + place_base +
                  R"(, "gpu_experts_per_layer": 1, "ndp_average_bits": 2, "losses": {"bits": [1, 2], "tabel": []}})") ==
      "p.json: losses.tabel: unknown key (allowed here: bits, table)");
  CHECK(schedule_error(R"({"model": "Mixtral-8x7B", "experts": [], "solvr": "exact"})") ==
        "p.json: solvr: unknown key (allowed here: model, num_dimms, experts, solver, max_iterations)");
  CHECK(schedule_error(
            R"({"model": "Mixtral-8x7B", "experts": [{"layer": 0, "expert": 0, "tokens": 1, "resdent": 1}]})") ==
        "p.json: experts[0].resdent: unknown key (allowed here: layer, expert, tokens, resident, layout)");
  CHECK(balance_error(R"({"tokens": [1], "load_seconds": 1, "cpu_seconds_per_token": 1, "solvr": "exact"})") ==
        "p.json: solvr: unknown key (allowed here: tokens, load_seconds, cpu_seconds_per_token, solver)");
  CHECK(balance_error(R"({"model": "Mixtral-8x7B", "experts": [{"layer": 0, "expert": 0, "tokens": 1, "bit": 4}]})") ==
        "p.json: experts[0].bit: unknown key (allowed here: layer, expert, tokens, bits)");
  // The example files hold no key outside their schema.
  CHECK_NOTHROW(static_cast<void>(
      tool::read_schedule_problem(tool::load_json((problems() / "schedule_step.json").string()), "s")));
}

TEST_CASE("schedule --machine: the machine's gpu and cpu replace the TriMoE presets") {
  const auto m = moepolicy::io::read_machine(machines() / "example-workstation.json");
  const json j = tool::load_json((problems() / "schedule_step.json").string());
  const auto paper = tool::read_schedule_problem(j, "s");
  const auto mine = tool::read_schedule_problem(j, "s", &m);
  CHECK(mine.gpu.name == "GeForce RTX 4090 24GB");
  CHECK(mine.cpu.name == "Ryzen 9 7950X (16 cores, DDR5-5200 x2)");
  CHECK(mine.dimms.name == paper.dimms.name);  // the role the file leaves out
  const auto a = tool::solve(paper);
  const auto b = tool::solve(mine);
  CHECK(b["devices"]["gpu"] == "GeForce RTX 4090 24GB");
  CHECK(a["devices"]["gpu"] == paper.gpu.name);
  // The machine's slower GPU and CPU price the same assignment higher (the DIMMs bound the
  // makespan of this step either way).
  CHECK(b["schedules"][0]["device_seconds"]["gpu"].get<double>() >
        a["schedules"][0]["device_seconds"]["gpu"].get<double>());
  CHECK(b["schedules"][0]["device_seconds"]["cpu"].get<double>() >
        a["schedules"][0]["device_seconds"]["cpu"].get<double>());
}

TEST_CASE("balance: Alg. 2, the best prefix and the exact split, uniform and priced") {
  const auto p = tool::read_balance_problem(tool::load_json((problems() / "balance_layer.json").string()), "b");
  const auto out = tool::solve(p);
  REQUIRE(out["splits"].size() == 3);
  CHECK(out["form"] == "uniform");
  // Alg. 2 by hand: sizes 60 41 33 24 17 9 5 1, t_load 4 ms, t_cpu 0.2 ms per token.
  // load 60 (C_load 4); cpu 1 (0.2), 5 (1.2), 9 (3.0), 17 (6.4); load 41 (8); cpu 24 (11.2);
  // load 33 (12): C_load 12 ms, C_cpu 11.2 ms.
  const auto& tp = out["splits"][0];
  CHECK(tp["solver"] == "two_pointer");
  CHECK(tp["loaded"].dump() == "[0,1,2]");
  CHECK(tp["makespan_seconds"].get<double>() == doctest::Approx(0.012));
  const double best = out["splits"][1]["makespan_seconds"].get<double>();
  const double exact = out["splits"][2]["makespan_seconds"].get<double>();
  CHECK(out["splits"][2]["status"] == "optimal");
  CHECK(exact == doctest::Approx(best));  // uniform costs: the best prefix is optimal
  CHECK(exact <= tp["makespan_seconds"].get<double>());
  // Priced: Mixtral experts on Edge-MoE's S1 GPU and CPU; the exact split bounds both.
  const auto q =
      tool::read_balance_problem(doc(R"({"model": "Mixtral-8x7B", "experts": [{"layer": 0, "expert": 0, "tokens": 30},
             {"layer": 0, "expert": 1, "tokens": 2, "bits": 4}, {"layer": 0, "expert": 2, "tokens": 9},
             {"layer": 0, "expert": 3, "tokens": 1}]})"),
                                 "q");
  const auto r = tool::solve(q);
  CHECK(r["form"] == "priced");
  const double e = r["splits"][2]["makespan_seconds"].get<double>();
  CHECK(e <= r["splits"][1]["makespan_seconds"].get<double>());
  CHECK(r["splits"][1]["makespan_seconds"].get<double>() <= r["splits"][0]["makespan_seconds"].get<double>());
  CHECK(balance_error(R"({"tokens": [], "load_seconds": 1, "cpu_seconds_per_token": 1})") ==
        "p.json: tokens: expected 1 to 65536 experts, got 0");
  CHECK(balance_error(R"({"tokens": [1], "load_seconds": -1, "cpu_seconds_per_token": 1})") ==
        "p.json: load_seconds: expected a number in [0, 1e6], got -1");
}

TEST_CASE("place --export: the placement as llama.cpp arguments and KTransformers rules, whole layers only") {
  // 2 layers of 6 experts, 3 on the GPU per layer: S = 6, one whole layer fits; layer 0
  // has more routed tokens, so it is the GPU layer and -ot names block 1.
  const auto p = tool::read_place_problem(
      doc(R"({"counts": [[8, 4, 10, 1, 1, 1], [1, 1, 1, 1, 1, 1]], "weight_sums": [[5, 2, 6, 1, 1, 1], [1, 1, 1, 1, 1, 1]],
              "gpu_experts_per_layer": 3, "uniform_bits": 4})"),
      "p");
  CHECK(tool::export_placement(p, "llamacpp", std::nullopt) ==
        "# From a placement of 6 GPU experts over 2 MoE layers of 6 experts.\n"
        "# llama.cpp stores a layer's experts in one tensor per projection (blk.N.ffn_*_exps), so only\n"
        "# whole layers move: 1 of 2 layers fit the same GPU memory (blocks 0); 0 of the placement's GPU experts stay "
        "unused.\n"
        "--n-gpu-layers 999 --override-tensor 'blk\\.1\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU'\n");
  const std::string k = tool::export_placement(p, "ktransformers", std::nullopt);
  CHECK(k.find("    name: \"^model\\\\.layers\\\\.0\\\\.mlp\\\\.experts$\"\n") != std::string::npos);
  CHECK_THROWS_WITH_AS(static_cast<void>(tool::export_placement(p, "vllm", std::nullopt)),
                       "moepolicy::export_placement: engine must be \"llamacpp\" or \"ktransformers\", got \"vllm\"",
                       moepolicy::invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(tool::export_placement(p, "llamacpp", moepolicy::models::mixtral_8x7b())),
                       "moepolicy::export_placement: the problem's layers differ from the MoE layers of Mixtral-8x7B "
                       "(32), got 2",
                       moepolicy::invalid_argument);
}
