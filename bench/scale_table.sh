#!/usr/bin/env bash
# bench/scale_table.sh BUILD_DIR [ROWS...]: the scale table of the README — for synthetic
# Mixtral-shaped canonical traces (bench/scale_trace.cpp) of each size, the file size and,
# per command, the wall time, the CPU time (user + system) and the peak resident memory
# (GNU time's %M, in kB of 1024 bytes, printed in MB of 10^6 bytes like the file size) of
# `moepolicy inspect`, `moepolicy replay --policy lru --capacity 64 128` (with its Belady
# and exact-LRU columns) and `moepolicy convert` (canonical to canonical).
# BASE=path/to/an/older/moepolicy adds that binary's figures for the same commands.
# The traces are written to SCALE_DIR (default: BUILD_DIR/scale) and removed after each size.
# Default sizes: 10^5 to 10^8 rows (10^8 rows: a 2.7 GB file).
set -euo pipefail
build=${1:?usage: bench/scale_table.sh BUILD_DIR [ROWS...]}
shift
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(100000 1000000 10000000 100000000)
tool=$build/examples/moepolicy
gen=$build/bench/scale_trace
dir=${SCALE_DIR:-$build/scale}
mkdir -p "$dir"
measure() {  # measure LABEL BIN ARGS...: one table row
  local label=$1 bin=$2
  shift 2
  local out
  out=$( { /usr/bin/time -f "%e %U %S %M" "$bin" "$@" > /dev/null; } 2>&1 | tail -1)
  read -r wall user sys kb <<< "$out"
  printf '| %s | %s | %s | %.2f | %.2f | %.1f |\n' "$rows" "$size_mb" "$label" "$wall" \
    "$(echo "$user + $sys" | bc)" "$(echo "scale=1; $kb * 1024 / 1000000" | bc)"
}
echo "| rows | file MB | command | wall s | CPU s | peak MB |"
echo "|---:|---:|---|---:|---:|---:|"
for rows in "${sizes[@]}"; do
  trace=$dir/scale-$rows.mtrace
  "$gen" "$rows" "$trace"
  size_mb=$(echo "scale=1; $(stat -c %s "$trace") / 1000000" | bc)
  for bin_label in "tool:$tool" ${BASE:+"base:$BASE"}; do
    who=${bin_label%%:*}
    bin=${bin_label#*:}
    suffix=$([ "$who" = base ] && echo " (before)" || true)
    measure "inspect$suffix" "$bin" inspect "$trace"
    measure "replay lru 64 128$suffix" "$bin" replay "$trace" --policy lru --capacity 64 128
    measure "convert$suffix" "$bin" convert "$trace" -o "$dir/copy.mtrace"
    rm -f "$dir/copy.mtrace"
  done
  rm -f "$trace"
done
