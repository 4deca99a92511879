"""The build's scratch files go to a temporary folder, not this checkout.

pip builds a local folder in place, and setuptools would leave build/ and
heterotune.egg-info/ beside the sources after `pip install ./clients/python`.
Everything else about the package is in pyproject.toml.
"""

import atexit
import shutil
import tempfile

from setuptools import setup

scratch = tempfile.mkdtemp(prefix="heterotune-build-")
atexit.register(shutil.rmtree, scratch, ignore_errors=True)
setup(options={"build": {"build_base": scratch + "/build"}, "egg_info": {"egg_base": scratch}})
