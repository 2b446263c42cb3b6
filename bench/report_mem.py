#!/usr/bin/env python3
"""bench/report_mem.py MOEPOLICY TRACE [OUT_DIR] [-- REPORT_OPTIONS...]: the peak resident
memory of each stage of `moepolicy report --trace TRACE` (one report family per stage), in
MB (10^6 bytes) and as a multiple of the trace file's size, for the memory figures of the
README. Options after `--` go to the report (e.g. `--jobs 16`, where the four stages that
read the trace held in memory, then CXL-MoE and Edge-MoE, run at once by default, or
`--stages-in-turn`); stages run at once are one row, from the group's line to its end.

The report prints a line on stderr as each stage starts and ends (see bench/report_cpu.py).
As a stage's start line arrives this script resets the child's peak resident set (writing 5
to /proc/PID/clear_refs) and, as its end line arrives, reads the peak since (VmHWM of
/proc/PID/status), so each stage's figure is the most it held while it ran, including
what the stages before it left resident. "peak so far" is the largest of these and of
what the start-up held, the run's peak. The reset happens as the line is read, a few
milliseconds after the stage starts, so memory a stage touches only in its first
milliseconds and gives back may be missed; and since the reset also clears the peak that
getrusage reports, the run's peak is not available otherwise (`/usr/bin/time -f %M` of a
run without this script gives it). Linux only; needs write access to /proc/PID/clear_refs
(the child is ours).
"""
import os
import re
import subprocess
import sys
import tempfile


def status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"{field} not in /proc/{pid}/status")


def reset_peak(pid):
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def main():
    args = sys.argv[1:]
    extra = []
    if "--" in args:
        extra = args[args.index("--") + 1:]
        args = args[:args.index("--")]
    if len(args) not in (2, 3):
        sys.exit(__doc__)
    tool, trace = args[0], args[1]
    out = args[2] if len(args) == 3 else tempfile.mkdtemp(prefix="report-mem-")
    file_mb = os.path.getsize(trace) / 1e6
    p = subprocess.Popen([tool, "report", "--trace", trace, "--out", out, "--force", "--progress-every", "0"] + extra,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # A stage's line, or a group's ("[4-7/10] 4 stages at once ..."): at its start, then
    # again with its time at its end. The stages of a group print only their end lines,
    # which are not read (the group's row is theirs).
    pattern = re.compile(r"report: \[(\d+)(?:-(\d+))?/\d+\] (.*?) \.\.\.( [0-9.]+ s)?")
    text, names, peak, seen, grouped = "", {}, {}, set(), set()
    first_stage_peak = None
    while True:
        chunk = os.read(p.stderr.fileno(), 65536)
        if not chunk:
            break
        text += chunk.decode(errors="replace")
        for m in pattern.finditer(text):
            i = int(m.group(1))
            if m.group(2):
                grouped.update(range(i, int(m.group(2)) + 1))
            elif i in grouped:
                continue
            key = (i, bool(m.group(4)))
            if key in seen:
                continue
            seen.add(key)
            names[i] = m.group(3)
            try:
                if m.group(4):
                    peak[i] = status_kb(p.pid, "VmHWM")
                else:
                    if first_stage_peak is None:
                        first_stage_peak = status_kb(p.pid, "VmHWM")  # what the start-up held
                    reset_peak(p.pid)
            except OSError:
                pass
    p.wait()
    if p.returncode != 0:
        sys.exit(f"report_mem: {tool} report exited with {p.returncode}")
    print(f"trace {trace}: {file_mb:.1f} MB")
    print("| stage | peak MB | × file | peak so far MB | × file |")
    print("|---|---:|---:|---:|---:|")
    # /proc/PID/status gives kB of 1024 bytes; MB here are 10^6 bytes, as the file's size.
    so_far = (first_stage_peak or 0) * 1024 / 1e6
    for i in sorted(peak):
        mb = peak[i] * 1024 / 1e6
        so_far = max(so_far, mb)
        print(f"| {names[i]} | {mb:.1f} | {mb / file_mb:.2f} | {so_far:.1f} | {so_far / file_mb:.2f} |")


if __name__ == "__main__":
    main()
