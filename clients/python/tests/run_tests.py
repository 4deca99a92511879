"""ctest's entry to the Python client's tests: `python3 -m pytest clients/python/tests -q`,
or, when this Python has no pytest, a skip that says so (exit 77, ctest's
SKIP_RETURN_CODE for it) rather than a failure or a silent pass."""

import os
import sys

try:
    import pytest
except ImportError:
    print(f"SKIPPED: pytest is not installed for {sys.executable} "
          "(Debian package python3-pytest; scripts/setup installs it)")
    sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
# No .pytest_cache in the source tree.
sys.exit(pytest.main([here, "-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
