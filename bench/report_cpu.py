#!/usr/bin/env python3
"""bench/report_cpu.py MOEPOLICY TRACE ROWS [OUT_DIR] [--jobs N] [--span]: the CPU time and the
wall time of each stage of `moepolicy report --trace TRACE [--jobs N]` (one report family per
stage), as seconds and microseconds per routing row, for the scale table of the README.
Without --jobs the report uses its default (the machine's hardware threads); --jobs 1 gives
each stage's CPU time on one thread. The report runs its stages one after another
(`--stages-in-turn`, which this script passes), since the process's CPU time cannot tell
stages run at once apart. With --span the report measures each stage's span (the
CPU time of its longest chain of work that runs one after another, `report --span`) and the
table adds it: on P cores a stage takes at least max(CPU / P, span).

The report prints a line on stderr as each stage starts and ends (after periodic progress
lines, which begin "report:   [", the stage's line is repeated whole with its time); this
script reads the child's user + system time from /proc/PID/stat as each line arrives (10 ms
resolution), so the CPU figures hold on a loaded machine; the wall time of a stage is read from a
monotonic clock as the same lines arrive. Linux only.
"""
import os
import re
import subprocess
import sys
import tempfile
import time


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of stat(5); fields[0] here is field 3.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    args = sys.argv[1:]
    passed = []  # the options handed on to the report
    span = "--span" in args
    if span:
        args.remove("--span")
        passed = ["--span"]
    if "--jobs" in args:
        i = args.index("--jobs")
        if i + 1 >= len(args):
            sys.exit(__doc__)
        passed += ["--jobs", args[i + 1]]
        del args[i:i + 2]
    if len(args) not in (3, 4):
        sys.exit(__doc__)
    tool, trace, rows = args[0], args[1], int(args[2])
    out = args[3] if len(args) == 4 else tempfile.mkdtemp(prefix="report-cpu-")
    p = subprocess.Popen([tool, "report", "--trace", trace, "--out", out, "--force", "--stages-in-turn"] + passed,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    text, start, end, names = "", {}, {}, {}
    wall_start, wall_end, spans = {}, {}, {}
    pattern = re.compile(r"report: \[(\d+)/\d+\] (.*?) \.\.\.( [0-9.]+ s)?")
    span_pattern = re.compile(r"report: \[(\d+)/\d+\] .*; CPU [0-9.]+ s, span ([0-9.]+) s\n")
    last = 0.0
    while True:
        chunk = os.read(p.stderr.fileno(), 65536)
        if not chunk:
            break
        now = time.monotonic()
        try:
            last = cpu_seconds(p.pid)
        except OSError:
            pass
        text += chunk.decode(errors="replace")
        for m in pattern.finditer(text):
            i = int(m.group(1))
            names[i] = m.group(2)
            start.setdefault(i, last)
            wall_start.setdefault(i, now)
            if m.group(3):
                end.setdefault(i, last)
                wall_end.setdefault(i, now)
        for m in span_pattern.finditer(text):
            spans[int(m.group(1))] = float(m.group(2))
    p.wait()
    if p.returncode != 0:
        sys.exit(f"report_cpu: {tool} report exited with {p.returncode}")
    stages = [(names[i], end[i] - start[i], wall_end[i] - wall_start[i], spans.get(i)) for i in sorted(end)]
    if span and any(x is None for *_, x in stages):
        sys.exit("report_cpu: a stage's line lacks its span")
    total = sum(s for _, s, _, _ in stages)
    total_wall = sum(w for _, _, w, _ in stages)
    head, rule = "| stage | CPU s | us CPU per row | wall s | us wall per row |", "|---|---:|---:|---:|---:|"
    if span:
        head, rule = head + " span s | us span per row |", rule + "---:|---:|"
    print(head)
    print(rule)

    def row(name, s, w, x):
        more = f" {x:.2f} | {1e6 * x / rows:.2f} |" if span else ""
        print(f"| {name} | {s:.2f} | {1e6 * s / rows:.2f} | {w:.2f} | {1e6 * w / rows:.2f} |" + more)

    for name, s, w, x in stages:
        row(name, s, w, x)
    row("all stages", total, total_wall, sum(x for *_, x in stages) if span else None)


if __name__ == "__main__":
    main()
