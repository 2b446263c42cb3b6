#!/usr/bin/env python3
"""bench/report_cpu.py MOEPOLICY TRACE ROWS [OUT_DIR]: the CPU time of each stage of
`moepolicy report --trace TRACE` (one report family per stage), as seconds and microseconds
per routing row, for the scale table of the README.

The report prints a line on stderr as each stage starts and ends (after periodic progress
lines, which begin "report:   [", the stage's line is repeated whole with its time); this
script reads the child's user + system time from /proc/PID/stat as each line arrives (10 ms
resolution), so the figures are CPU time, not wall time, and hold on a loaded machine.
Linux only.
"""
import os
import re
import subprocess
import sys
import tempfile


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of stat(5); fields[0] here is field 3.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    tool, trace, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
    out = sys.argv[4] if len(sys.argv) == 5 else tempfile.mkdtemp(prefix="report-cpu-")
    p = subprocess.Popen([tool, "report", "--trace", trace, "--out", out, "--force"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    text, start, end, names = "", {}, {}, {}
    pattern = re.compile(r"report: \[(\d+)/\d+\] (.*?) \.\.\.( [0-9.]+ s)?")
    last = 0.0
    while True:
        chunk = os.read(p.stderr.fileno(), 65536)
        if not chunk:
            break
        try:
            last = cpu_seconds(p.pid)
        except OSError:
            pass
        text += chunk.decode(errors="replace")
        for m in pattern.finditer(text):
            i = int(m.group(1))
            names[i] = m.group(2)
            start.setdefault(i, last)
            if m.group(3):
                end.setdefault(i, last)
    p.wait()
    if p.returncode != 0:
        sys.exit(f"report_cpu: {tool} report exited with {p.returncode}")
    stages = [(names[i], end[i] - start[i]) for i in sorted(end)]
    total = sum(s for _, s in stages)
    print(f"| stage | CPU s | us per row |")
    print(f"|---|---:|---:|")
    for name, s in stages:
        print(f"| {name} | {s:.2f} | {1e6 * s / rows:.2f} |")
    print(f"| all stages | {total:.2f} | {1e6 * total / rows:.2f} |")


if __name__ == "__main__":
    main()
