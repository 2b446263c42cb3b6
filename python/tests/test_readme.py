"""The README's Python example prints what the README says it prints."""

import os
import pathlib
import re
import subprocess
import sys

import moepolicy

# The subprocesses import the same module as this test.
ENV = dict(os.environ, PYTHONPATH=str(pathlib.Path(moepolicy.__file__).resolve().parent.parent))

ROOT = pathlib.Path(os.environ.get("MOEPOLICY_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))


def test_readme_python_example():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Using it from Python"):]
    section = section[:section.index("\n## ", 1)]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    expected = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    assert 8 <= len(code.strip().splitlines()) <= 14  # a short example
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=ENV, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout == expected


def test_example_script_runs():
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "python" / "replay_bundled_trace.py")],
                         env=ENV, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "belady" in run.stdout and "hit ratio" in run.stdout and "deepseek" in run.stdout


def test_call_overhead_script_runs():
    """The benchmark script (python/bench/call_overhead.py) runs; its figures are not asserted."""
    run = subprocess.run([sys.executable, str(ROOT / "python" / "bench" / "call_overhead.py"), "--no-cpp",
                          "--repeat", "1"], env=ENV, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "TwoPointerBalancer.balance (256 experts)" in run.stdout and "ExpertCache('lru')" in run.stdout
