"""Shared test setup: quiet TensorFlow logs and hypothesis profiles."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from hypothesis import HealthCheck, settings  # noqa: E402

# The first call of every new shape builds kernels and traces functions, so
# per-example time varies a lot: no deadline. `HYPOTHESIS_PROFILE=thorough`
# runs many more random configurations.
settings.register_profile(
    "default",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
