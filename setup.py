"""Builds the extension moepolicy._core with CMake (python/CMakeLists.txt) for setuptools.

`pip install --no-build-isolation .` runs this: CMake configures a build of the module
alone (no tests, examples or benchmarks) for the interpreter running pip, and the
extension is copied where setuptools packages it. MOEPOLICY_JOBS sets the build's
parallelism (default 2). MOEPOLICY_PYTHON_PREBUILT names a folder that already holds
a built _core*.so (for example <build>/python/moepolicy of a CMake build with
MOEPOLICY_BUILD_PYTHON=ON for the same interpreter), to package it without compiling.
"""

import glob
import os
import pathlib
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent


def version():
    text = (ROOT / "include" / "moepolicy" / "version.hpp").read_text()
    parts = [re.search(rf"#define MOEPOLICY_VERSION_{p} (\d+)", text).group(1) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        target = pathlib.Path(self.get_ext_fullpath(ext.name)).resolve()
        target.parent.mkdir(parents=True, exist_ok=True)
        prebuilt = os.environ.get("MOEPOLICY_PYTHON_PREBUILT")
        if prebuilt:
            found = glob.glob(os.path.join(prebuilt, "_core*.so"))
            if not found:
                sys.exit(f"setup.py: MOEPOLICY_PYTHON_PREBUILT={prebuilt} holds no _core*.so")
            shutil.copyfile(found[0], target)
            return
        build = pathlib.Path(self.build_temp).resolve() / "cmake"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.check_call(
            ["cmake", "-S", str(ROOT), "-B", str(build), *generator, "-DCMAKE_BUILD_TYPE=Release",
             "-DMOEPOLICY_BUILD_PYTHON=ON", "-DMOEPOLICY_BUILD_TESTS=OFF", "-DMOEPOLICY_BUILD_EXAMPLES=OFF",
             "-DMOEPOLICY_BUILD_BENCH=OFF", "-DMOEPOLICY_INSTALL=OFF", f"-DPython_EXECUTABLE={sys.executable}"])
        jobs = os.environ.get("MOEPOLICY_JOBS", "2")
        subprocess.check_call(["cmake", "--build", str(build), "--target", "moepolicy_python", "-j", jobs])
        built = glob.glob(str(build / "python" / "moepolicy" / "_core*.so"))
        shutil.copyfile(built[0], target)


setup(
    version=version(),
    packages=["moepolicy"],
    package_dir={"": "python"},
    package_data={"moepolicy": ["*.pyi", "py.typed"]},
    ext_modules=[Extension("moepolicy._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
