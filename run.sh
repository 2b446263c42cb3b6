#!/usr/bin/env bash
# The two jobs of the README, on a fresh Debian 12 machine:
#   ./run.sh main   build the moepolicy tool and run `moepolicy report`: every policy family
#                   on the bundled traces (and on ../shared/traces when present), written to
#                   report/index.md with SVG plots
#   ./run.sh test   build and run every test with both compilers: clang 14 with ASan + UBSan
#                   (float-cast-overflow and implicit-integer-truncation included) and g++ 12
#                   (the tests unoptimised; the examples, the Python module and its pytest
#                   suite and the benchmarks at -O2), all with -Werror; header
#                   self-containment, packaging, benchmarks (smoke) and their
#                   instruction-count guard (callgrind, against bench/callgrind_baseline.txt),
#                   ThreadSanitizer on the concurrent residency mechanism, the replays' threads
#                   and the shared decode streams, and a libFuzzer run
#                   per reader (traces, machine files, the problem files of bitwidth, place
#                   and schedule)
#   ./run.sh fuzz SECONDS
#                   build the libFuzzer targets and run each for SECONDS (one at a time),
#                   printing the executions each reached; for long offline runs. The corpus
#                   grows in build/fuzz/tests/fuzz/corpus/ across runs. MOEPOLICY_FUZZ_RUNS=N
#                   also stops each fuzzer after N executions (SECONDS still caps it), and
#                   MOEPOLICY_FUZZ_TARGETS=REGEX runs only the fuzzers whose names match.
# Each installs the Debian packages it needs when they are missing.
set -euo pipefail
cd "$(dirname "$0")"

jobs=${MOEPOLICY_JOBS:-2}
fuzz_seconds=${MOEPOLICY_FUZZ_SECONDS:-15}

packages_main=(cmake ninja-build g++ libeigen3-dev libcli11-dev nlohmann-json3-dev)
packages_test=("${packages_main[@]}" clang-14 libclang-rt-14-dev lld doctest-dev libbenchmark-dev pkg-config valgrind
  pybind11-dev python3-dev python3-numpy python3-pytest python3-setuptools python3-pip python3-venv)

ensure_packages() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "== installing: ${missing[*]}"
    local sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}

passed=0
failed=0
skipped=0
run_ctest() {  # run_ctest <build-dir> <ctest args...>: runs ctest and adds up its counts
  local dir=$1; shift
  local log
  log=$(mktemp)
  local rc=0
  (cd "$dir" && ctest "$@") 2>&1 | tee "$log" || rc=$?
  local total fail skip
  total=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\2/p' "$log" | tail -n 1)
  fail=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of.*/\1/p' "$log" | tail -n 1)
  skip=$(grep -c '\*\*\*Skipped\| Skipped ' "$log" || true)
  rm -f "$log"
  passed=$((passed + ${total:-0} - ${fail:-0} - skip))
  failed=$((failed + ${fail:-0}))
  skipped=$((skipped + skip))
  return "$rc"
}

configure() {  # configure <build-dir> <cmake args...>
  local dir=$1; shift
  cmake -S . -B "$dir" -G Ninja "$@" >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
}

run_main() {
  ensure_packages "${packages_main[@]}"
  mkdir -p build
  configure build/release -DCMAKE_BUILD_TYPE=Release -DMOEPOLICY_BUILD_TESTS=OFF -DMOEPOLICY_BUILD_BENCH=OFF
  cmake --build build/release -j"$jobs" --target moepolicy_tool
  # Every policy family on the bundled traces (and on ../shared/traces when present), with
  # plots: report/index.md.
  build/release/examples/moepolicy report --out report
  echo "== report written: $(pwd)/report/index.md ($(find report -name '*.svg' | wc -l) SVG plots)"
}

run_test() {
  ensure_packages "${packages_test[@]}"
  mkdir -p build
  local start=$SECONDS
  # LLVM's linker: the stages link some two hundred test programs, a second each with GNU ld.
  local lld=(-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld
    -DCMAKE_MODULE_LINKER_FLAGS=-fuse-ld=lld)

  # Every test, example and header is compiled by both compilers: clang under the
  # sanitizers (clang compiles an instrumented test in about half of g++'s time), g++
  # without them.
  echo "== clang 14, ASan + UBSan (with float-cast-overflow and implicit-integer-truncation), -Werror: unit tests, examples, header check, packaging"
  configure build/ci-clang-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++-14 \
    -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only -DMOEPOLICY_WERROR=ON \
    -DMOEPOLICY_SANITIZERS=address,undefined,implicit-integer-truncation -DMOEPOLICY_BUILD_BENCH=OFF "${lld[@]}"
  cmake --build build/ci-clang-asan -j"$jobs"
  # Under ASan: every unit test, and each driver's Granite golden or example. The whole
  # reports (every family on Granite, on the shared traces, on a whole machine), the drivers'
  # runs on the shared traces and the option variants of a driver ASan already runs take
  # minutes together unoptimised under ASan; the g++ stage below runs them optimised. ASan
  # runs the whole report once, on three threads, and Edge-MoE's driver on the default threads
  # and on three; the report's other runs (its progress lines, one stage after another, on a
  # machine file) run in the g++ stage.
  local asan_slow='^(golden_report_granite|golden_report_granite_jobs_1|example_report_(span|requests_shown|progress_in_turn|warp_kimi_untimed)|report_svgs_well_formed|example_report_machine_workstation|example_report_warp_traces|example_trimoe_machine_example-workstation|golden_cxl_prefetch_(granite|mixtral)|golden_edge_offload_granite_jobs_1|golden_(edge_offload|context_aware_ndp|trimoe)_mixtral|example_reuse_eviction_(shared|granite_shared)|example_dynaexq_(phased_drains|arenas_fit|queued_at_end))$'
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_ctest build/ci-clang-asan -j"$jobs" --output-on-failure -E "$asan_slow"

  echo "== g++ 12, -Werror, unoptimised: unit tests"
  configure build/ci-gcc-tests -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=g++ -DCMAKE_CXX_FLAGS_DEBUG=-O0 \
    -DMOEPOLICY_WERROR=ON -DMOEPOLICY_BUILD_EXAMPLES=OFF -DMOEPOLICY_BUILD_BENCH=OFF -DMOEPOLICY_HEADER_CHECK=OFF \
    "${lld[@]}"
  cmake --build build/ci-gcc-tests -j"$jobs"
  run_ctest build/ci-gcc-tests -j"$jobs" --output-on-failure -E '^package_'

  # The Python module is built here, not under ASan above: an instrumented extension would need
  # the sanitizer runtime preloaded into the interpreter.
  echo "== g++ 12, -Werror, -O2: examples (the slow report runs included), the Python module and its pytest suite, benchmarks (smoke run)"
  configure build/ci-gcc-release -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=g++ \
    -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" -DMOEPOLICY_WERROR=ON -DMOEPOLICY_BUILD_TESTS=OFF \
    -DMOEPOLICY_HEADER_CHECK=OFF -DMOEPOLICY_BUILD_PYTHON=ON -DMOEPOLICY_BUILD_PYTHON_TESTS=ON "${lld[@]}"
  cmake --build build/ci-gcc-release -j"$jobs"
  run_ctest build/ci-gcc-release -j"$jobs" --output-on-failure
  for b in build/ci-gcc-release/bench/*_bench; do
    [ -x "$b" ] || continue
    echo "-- smoke: $b"
    "$b" --benchmark_min_time=0.001 >/dev/null
  done

  # The instruction-count baseline belongs to clang 14's RelWithDebInfo build: one driver.
  echo "== clang 14, RelWithDebInfo: the callgrind instruction-count guard (bench/callgrind_guard.sh)"
  configure build/ci-clang-guard -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
    -DMOEPOLICY_WERROR=ON -DMOEPOLICY_BUILD_TESTS=OFF -DMOEPOLICY_BUILD_EXAMPLES=OFF -DMOEPOLICY_HEADER_CHECK=OFF
  cmake --build build/ci-clang-guard -j"$jobs" --target callgrind_guard_driver
  run_ctest build/ci-clang-guard --output-on-failure -R '^bench_callgrind_guard$'

  echo "== clang 14, ThreadSanitizer: the concurrent residency mechanism, the replays' thread pool and its span meter, shared decode streams and their formation on several threads"
  configure build/ci-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" \
    -DMOEPOLICY_WERROR=ON -DMOEPOLICY_SANITIZERS=thread -DMOEPOLICY_BUILD_EXAMPLES=OFF -DMOEPOLICY_BUILD_BENCH=OFF \
    -DMOEPOLICY_HEADER_CHECK=OFF "${lld[@]}"
  local tsan_targets
  tsan_targets="$(ninja -C build/ci-tsan -t targets all | sed -n 's/^\(test_residency_[a-z_]*\): .*/\1/p' | sort -u)
    test_detail_task_pool test_detail_span_meter test_sim_offload_replay test_sim_edge_replay test_sim_decode_streams"
  # shellcheck disable=SC2086 # one target per word
  cmake --build build/ci-tsan -j"$jobs" --target $tsan_targets
  # The residency tests, the pool's, the lockstep replays on several threads, the decode
  # streams the report's timed families share, and streams formed on several threads.
  TSAN_OPTIONS=halt_on_error=1 run_ctest build/ci-tsan -j"$jobs" --output-on-failure \
    -R '^test_residency_|^test_detail_task_pool|^test_detail_span_meter|^test_sim_(offload|edge)_replay: ?a sweep on several threads|^test_sim_decode_streams: ?(shared_decode_streams|on several threads)'

  echo "== libFuzzer: each reader (traces, machine files, problem files) for ${fuzz_seconds}s"
  configure build/ci-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
    -DMOEPOLICY_BUILD_FUZZERS=ON -DMOEPOLICY_BUILD_TESTS=OFF -DMOEPOLICY_BUILD_EXAMPLES=OFF \
    -DMOEPOLICY_BUILD_BENCH=OFF -DMOEPOLICY_FUZZ_SECONDS="$fuzz_seconds" "${lld[@]}"
  cmake --build build/ci-fuzz -j"$jobs"
  run_ctest build/ci-fuzz -j"$jobs" --output-on-failure -L fuzz

  echo "== all checks passed in $((SECONDS - start)) s"
  echo "tests: $passed passed, $failed failed, $skipped skipped"
}

run_fuzz() {
  local seconds=${1:-}
  case "$seconds" in
    '' | *[!0-9]*) echo "usage: $0 fuzz SECONDS (a whole number of seconds per fuzzer)" >&2; exit 2 ;;
  esac
  ensure_packages "${packages_test[@]}"
  mkdir -p build
  local dir=${MOEPOLICY_FUZZ_BUILD_DIR:-build/fuzz}
  echo "== libFuzzer: each target for ${seconds}s, one at a time, in $dir"
  configure "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
    -DMOEPOLICY_BUILD_FUZZERS=ON -DMOEPOLICY_BUILD_TESTS=OFF -DMOEPOLICY_BUILD_EXAMPLES=OFF \
    -DMOEPOLICY_BUILD_BENCH=OFF -DMOEPOLICY_FUZZ_SECONDS="$seconds" \
    -DMOEPOLICY_FUZZ_RUNS="${MOEPOLICY_FUZZ_RUNS:-0}"
  cmake --build "$dir" -j"$jobs"
  local log="$dir/fuzz-${seconds}s.log"
  local rc=0
  (cd "$dir" && ctest -L fuzz -R "${MOEPOLICY_FUZZ_TARGETS:-.}" -V -j1) >"$log" 2>&1 || rc=$?
  printf '%-24s %14s %10s %10s\n' fuzzer executions "per second" "new units"
  # ctest -V prefixes each line with the test's number: map numbers to fuzzer names, then
  # print each fuzzer's final libFuzzer statistics.
  awk '
    match($0, /^[0-9]+: Test command: [^ ]*\/fuzz_[a-z_0-9]+/) {
      n = substr($0, 1, index($0, ":") - 1)
      cmd = $4; sub(/.*\//, "", cmd); name[n] = cmd
    }
    /^[0-9]+: stat::number_of_executed_units:/ { n = substr($0, 1, index($0, ":") - 1); execs[n] = $NF }
    /^[0-9]+: stat::average_exec_per_sec:/ { n = substr($0, 1, index($0, ":") - 1); rate[n] = $NF }
    /^[0-9]+: stat::new_units_added:/ { n = substr($0, 1, index($0, ":") - 1); added[n] = $NF }
    END {
      for (n in name) printf "%-24s %14s %10s %10s\n", name[n], execs[n], rate[n], added[n]
    }' "$log" | sort
  grep -E '(Passed|Failed|\*\*\*).* sec$|tests passed' "$log" || true
  echo "== full log: $log"
  return "$rc"
}

case "${1:-}" in
  main) run_main ;;
  test) run_test ;;
  fuzz) run_fuzz "${2:-}" ;;
  *) echo "usage: $0 main|test|fuzz SECONDS" >&2; exit 2 ;;
esac
