"""Fixtures shared by every test folder (the test bed lives in testbed.fixtures), and the
hypothesis profiles.

Fuzzing runs with a fixed budget: every property test either names its own
``max_examples`` or gets the profile's. Under ``CI=true`` the ``ci`` profile is
loaded: derandomized (the same examples on every run of the same tests, so CI is
reproducible and a failure reruns identically), no example database, no deadline (the
machine may be loaded). Hypothesis also draws constants from the project's modules that
are imported, so a run of part of the suite may draw other examples than the whole
suite: a failure found one way is replayed with the ``@reproduce_failure`` blob it
prints (``print_blob``). Elsewhere the ``dev`` profile draws new random examples each run.
``HYPOTHESIS_PROFILE`` picks another profile explicitly (e.g. ``deep`` for a long
local fuzzing session).
"""

import os

from hypothesis import settings

from testbed.fixtures import member_namespace, testbed

#: Examples per property test that does not name its own count.
FUZZ_EXAMPLES = 50

settings.register_profile("dev", max_examples=FUZZ_EXAMPLES, deadline=None)
settings.register_profile(
    "ci",
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
)
settings.register_profile("deep", max_examples=5000, deadline=None)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE")
    or ("ci" if os.environ.get("CI", "").lower() == "true" else "dev")
)

__all__ = ["member_namespace", "testbed"]
