"""`pip install --no-build-isolation .` into a fresh virtual environment, then `import moepolicy`.

Debian's pip refuses to install into the system interpreter (PEP 668), so the install goes
into a venv that sees the system's site packages (numpy, setuptools). To stay within the
test command's time this packages the module the suite has just built
(MOEPOLICY_PYTHON_PREBUILT) instead of compiling it again; the README gives the command
that compiles it, which is the same setup.py with that variable unset.
"""

import os
import pathlib
import subprocess
import sys

import pytest

import moepolicy

ROOT = pathlib.Path(os.environ.get("MOEPOLICY_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))


def test_pip_install_into_a_venv(tmp_path):
    venv = tmp_path / "venv"
    try:
        # Without its own pip (copying one in takes seconds): the interpreter's pip installs
        # into it through --python.
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                       check=True, capture_output=True)
    except subprocess.CalledProcessError as e:
        pytest.skip(f"python3 -m venv is not available here (Debian: python3-venv): {e.stderr.decode()[-200:]}")
    env = dict(os.environ, MOEPOLICY_PYTHON_PREBUILT=str(pathlib.Path(moepolicy.__file__).parent))
    env.pop("PYTHONPATH", None)
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                          "--no-build-isolation", "--no-index", "--no-cache-dir", "--quiet", str(ROOT)],
                         env=env, capture_output=True, text=True)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    code = "import moepolicy, numpy; print(moepolicy.__file__); print(moepolicy.ExpertCache('lru', 1, 4, 2).access(0, [1]))"
    run = subprocess.run([str(venv / "bin" / "python"), "-c", code], env=env, cwd=tmp_path, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    installed, hits = run.stdout.splitlines()
    assert installed.startswith(str(venv)) and hits == "[False]"
    stubs = pathlib.Path(installed).parent
    assert (stubs / "py.typed").exists() and (stubs / "_core.pyi").exists()
