"""Shared test setup: quiet TensorFlow logs and hypothesis profiles."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from hypothesis import HealthCheck, settings  # noqa: E402

# The first call of every new shape builds kernels and traces functions, so
# per-example time varies a lot: no deadline.
# - `default` (a plain `pytest`): random examples, failures kept in .hypothesis/.
# - `ci` (`make test`): derandomized and without the example database, so a
#   red run replays exactly on any machine; a failure prints its reproduce blob.
# - `thorough`: many more random configurations.
# - `quick`: derandomized, few examples (the TensorFlow version window).
settings.register_profile(
    "default",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "ci",
    parent=settings.get_profile("default"),
    derandomize=True,
    database=None,
    print_blob=True,
)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=500)
# `quick`: the `ci` profile with fewer examples, for the TensorFlow version
# window (tools/tf_versions_test.sh), which checks building and loading.
settings.register_profile("quick", parent=settings.get_profile("ci"), max_examples=15)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_report_header() -> str:
    return f"hypothesis profile: {settings.get_current_profile_name()}"
