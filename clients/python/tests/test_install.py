"""`pip install ./clients/python` gives a working package with Debian's python3, cleanly.

pip runs offline here (--no-index --no-build-isolation: the build uses the
setuptools and wheel of the Python running the test, python3-setuptools and
python3-wheel on Debian), into a fresh virtual environment, from a copy of
clients/python as it is in the checkout. The build says nothing is wrong with
the package (no warning in pip's verbose output, which carries setuptools'
own) and leaves the copy as it found it: no build/ or *.egg-info in it."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import CLIENT_DIR


def test_pip_installs_the_package_into_a_venv(tmp_path):
    for module in ("venv", "ensurepip", "setuptools", "wheel"):
        pytest.importorskip(module, reason=f"{sys.executable} has no {module} module to build and install with")
    source = tmp_path / "src"
    shutil.copytree(CLIENT_DIR, source, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    before = sorted(str(p.relative_to(source)) for p in source.rglob("*"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    r = subprocess.run([py, "-m", "pip", "install", "-v", "--no-index", "--no-build-isolation", "--no-deps",
                        "--disable-pip-version-check", str(source)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    # setuptools' own notes that pip's -v shows, and which say nothing of the package.
    noise = ("byte-compiling is disabled",)
    complaint = re.compile(r"\bwarn|\berror\b|deprecat|\bbeta\b", re.IGNORECASE)
    warnings = [line for line in (r.stdout + r.stderr).splitlines()
                if complaint.search(line) and not any(n in line for n in noise)]
    assert warnings == [], "\n".join(warnings)
    after = sorted(str(p.relative_to(source)) for p in source.rglob("*"))
    assert after == before, f"the build left {sorted(set(after) - set(before))} in the source folder"
    # Imported from the venv's site-packages, not from the copy or this checkout.
    r = subprocess.run([py, "-c", "import heterotune, sys; print(heterotune.__file__); "
                        "print(heterotune.metric_line(1, loss=0.5)); print(heterotune.Client('127.0.0.1:1').url)"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    where, line, url = r.stdout.splitlines()
    assert where.startswith(str(venv)) and "site-packages" in where
    assert line == "hpo: step=1 loss=0.5" and url == "http://127.0.0.1:1"
