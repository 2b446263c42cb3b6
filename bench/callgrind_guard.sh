#!/usr/bin/env bash
# The instruction-count regression guard: runs the guard's workloads
# (bench/callgrind_guard.cpp) under `valgrind --tool=callgrind` and compares each
# workload's instructions (callgrind's inclusive Ir of its `moepolicy_guard_<name>`
# function) with the committed baseline. Instruction counts repeat from run to run where
# timings on a shared machine do not.
#
#   bench/callgrind_guard.sh DRIVER BASELINE            compare; exit 1 on a regression
#   bench/callgrind_guard.sh DRIVER BASELINE --update   write the current counts as the baseline
#
# A workload regresses when it executes more than 10% more instructions than its baseline
# (MOEPOLICY_GUARD_TOLERANCE, in percent, changes the threshold); one that executes more
# than 10% fewer is reported as an improvement, with a reminder to update the baseline.
# Counts depend on the compiler and build type: the baseline records the one it was made
# with (the first line, "# build: clang 14 RelWithDebInfo", as `DRIVER --describe` prints
# it), and a driver of another build is refused (exit 2) unless updating.
# Needs valgrind (Debian package `valgrind`, which provides callgrind_annotate).
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ] || { [ $# -eq 3 ] && [ "$3" != "--update" ]; }; then
  echo "usage: $0 DRIVER BASELINE [--update]" >&2
  exit 2
fi
driver=$1
baseline=$2
update=${3:-}
tolerance=${MOEPOLICY_GUARD_TOLERANCE:-10}

for tool in valgrind callgrind_annotate; do
  command -v "$tool" >/dev/null || { echo "callgrind_guard: $tool not found (Debian package valgrind)" >&2; exit 2; }
done
[ -x "$driver" ] || { echo "callgrind_guard: driver $driver is not an executable" >&2; exit 2; }

build=$("$driver" --describe)
if [ -z "$update" ]; then
  [ -r "$baseline" ] || { echo "callgrind_guard: baseline $baseline not found (run with --update)" >&2; exit 2; }
  pinned=$(sed -n 's/^# build: //p' "$baseline" | head -n 1)
  if [ "$pinned" != "$build" ]; then
    echo "callgrind_guard: the baseline counts a \"$pinned\" build, this driver is \"$build\"" >&2
    exit 2
  fi
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out" "$driver" >"$work/driver.log" 2>"$work/valgrind.log" || {
  cat "$work/valgrind.log" >&2
  echo "callgrind_guard: the driver failed under valgrind" >&2
  exit 2
}
# Inclusive instruction counts of the workload functions: "name count" per line.
callgrind_annotate --inclusive=yes --threshold=100 "$work/callgrind.out" 2>/dev/null |
  sed -n 's/^ *\([0-9,]*\) .*\(moepolicy_guard_[a-z0-9_]*\).*/\2 \1/p' | tr -d ',' | sort -u -k1,1 >"$work/counts"
[ -s "$work/counts" ] || { echo "callgrind_guard: no moepolicy_guard_ function in the profile" >&2; exit 2; }

if [ -n "$update" ]; then
  {
    echo "# build: $build"
    echo "# Instructions (callgrind Ir, inclusive) of each workload of bench/callgrind_guard.cpp,"
    echo "# written by bench/callgrind_guard.sh --update; compared with a tolerance of 10%."
    cat "$work/counts"
  } >"$baseline"
  echo "callgrind_guard: baseline written: $baseline ($(wc -l <"$work/counts") workloads, $build)"
  exit 0
fi

status=0
printf '%-40s %15s %15s %8s\n' workload baseline now change
while read -r name base; do
  case "$name" in '#'*|'') continue ;; esac
  now=$(awk -v n="$name" '$1 == n { print $2 }' "$work/counts")
  if [ -z "$now" ]; then
    printf '%-40s %15s %15s %8s  MISSING\n' "$name" "$base" "-" "-"
    status=1
    continue
  fi
  verdict=$(awk -v a="$base" -v b="$now" -v t="$tolerance" 'BEGIN {
    c = (b - a) * 100.0 / a; v = "";
    if (c > t) v = "REGRESSION"; else if (c < -t) v = "improved: update the baseline";
    printf "%+7.1f%%  %s", c, v }')
  printf '%-40s %15s %15s %s\n' "$name" "$base" "$now" "$verdict"
  case "$verdict" in *REGRESSION*) status=1 ;; esac
done <"$baseline"
while read -r name now; do
  grep -q "^$name " "$baseline" || { printf '%-40s %15s %15s  NEW: not in the baseline\n' "$name" "-" "$now"; status=1; }
done <"$work/counts"
if [ "$status" -ne 0 ]; then
  echo "callgrind_guard: FAILED (a workload regressed more than $tolerance%, or the workloads changed: rerun with --update when intended)"
else
  echo "callgrind_guard: ok (tolerance $tolerance%, $build)"
fi
exit "$status"
