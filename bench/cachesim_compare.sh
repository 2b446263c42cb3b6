#!/usr/bin/env bash
# bench/cachesim_compare.sh BUILD_DIR CACHESIM [ROWS...]: `moepolicy replay --policy lru`
# against libCacheSim's `cachesim` on the same access sequence, as whole processes.
#
# For each size, a synthetic Mixtral-shaped canonical trace (bench/scale_trace.cpp) is
# written, and its access sequence (README, "Traces at scale") is written in libCacheSim's
# oracleGeneral binary format by bench/cachesim_trace.cpp (24 bytes per access, the next
# uses included, so cachesim's Belady reads the same future). Then, each measured with GNU
# time (wall, user + system CPU, peak resident memory in MB of 10^6 bytes):
#   moepolicy replay TRACE --policy lru --capacity 64 128   (LRU at both capacities, with
#       its Belady and exact-LRU columns: the work the command does by default)
#   moepolicy replay TRACE --policy lru --capacity 64 128 --reference none   (LRU alone,
#       and its exact curve, of which the LRU column is read)
#   cachesim BIN oracleGeneral lru 64,128 --ignore-obj-size=1      (LRU only)
#   cachesim BIN oracleGeneral lru,belady 64,128 --ignore-obj-size=1 (LRU and Belady, the
#       columns `replay` prints by default but its exact-LRU curve)
# and the LRU hit ratios of both tools are printed side by side (they must agree). Each
# tool reads its own format: `replay` the canonical file (27 bytes a row, 13.5 per access),
# `cachesim` the oracleGeneral file; writing that file is not counted.
#
# CACHESIM is the path of libCacheSim's `cachesim` binary (libCacheSim is not a dependency
# of this project: build it on its own; its build needs GLib's development headers). When
# it is absent the script says so and exits 0. Default sizes: 10^7 and 10^8 rows. The files
# go to SCALE_DIR (default BUILD_DIR/scale) and are removed after each size.
set -euo pipefail
build=${1:?usage: bench/cachesim_compare.sh BUILD_DIR CACHESIM [ROWS...]}
cachesim=${2:-}
shift $(($# >= 2 ? 2 : $#))
if [ -z "$cachesim" ] || [ ! -x "$cachesim" ]; then
  echo "cachesim_compare: libCacheSim's cachesim not found (given: '${cachesim}'); skipping the comparison"
  exit 0
fi
cachesim=$(realpath "$cachesim")
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(10000000 100000000)
tool=$(realpath "$build/examples/moepolicy")
gen=$build/bench/scale_trace
export_bin=$build/bench/cachesim_trace
dir=$(realpath -m "${SCALE_DIR:-$build/scale}")
mkdir -p "$dir"

timed() {  # timed OUTFILE CMD...: runs CMD (stdout to OUTFILE), prints "wall cpu peakMB"
  local out=$1
  shift
  /usr/bin/time -o "$out.time" -f "%e %U %S %M" "$@" > "$out" 2> /dev/null
  read -r wall user sys kb < "$out.time"
  printf '%.2f %.2f %.1f' "$wall" "$(echo "$user + $sys" | bc)" "$(echo "scale=1; $kb * 1024 / 1000000" | bc)"
}

echo "| rows | accesses | command | wall s | CPU s | peak MB | LRU hit ratio 64 / 128 | Belady 64 / 128 |"
echo "|---:|---:|---|---:|---:|---:|---|---|"
for rows in "${sizes[@]}"; do
  trace=$dir/compare-$rows.mtrace
  bin=$dir/compare-$rows.oracleGeneral
  "$gen" "$rows" "$trace"
  "$export_bin" "$trace" "$bin" 2> /dev/null
  accesses=$(($(stat -c %s "$bin") / 24))

  ours() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" / ".join("%.4f" % r[sys.argv[2]] for r in d["rows"] if sys.argv[2] in r))' "$dir/ours.json" "$1"; }
  for reference in belady none; do
    extra=()
    label=""
    if [ "$reference" = none ]; then
      extra=(--reference none)
      label=" --reference none"
    fi
    read -r wall cpu mb <<< "$(timed "$dir/ours.json" "$tool" replay "$trace" --policy lru --capacity 64 128 "${extra[@]}" --json)"
    echo "| $rows | $accesses | \`moepolicy replay --policy lru --capacity 64 128$label\` | $wall | $cpu | $mb | $(ours lru) | $(ours belady) |"
  done

  for algos in lru lru,belady; do
    # cachesim writes result/ under the working directory.
    read -r wall cpu mb <<< "$(cd "$dir" && timed "$dir/theirs.txt" "$cachesim" "$bin" oracleGeneral "$algos" 64,128 --ignore-obj-size=1)"
    theirs() {
      awk -v name="$1" '$2 == name && $3 == "cache" { for (i = 1; i <= NF; ++i) if ($i == "ratio") { printf "%s%.4f", sep, 1 - $(i + 1); sep = " / "; break } }' "$dir/theirs.txt"
    }
    echo "| $rows | $accesses | \`cachesim BIN oracleGeneral $algos 64,128 --ignore-obj-size=1\` | $wall | $cpu | $mb | $(theirs LRU) | $(theirs Belady) |"
  done
  rm -rf "$trace" "$bin" "$dir"/ours.json* "$dir"/theirs.txt* "$dir/result"
done
