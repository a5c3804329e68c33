"""Suite-wide settings. Hypothesis runs a fixed, CI-sized budget with no
per-example deadline (a loaded 2-core CI machine must not turn slowness into
failures); POOL_HYPOTHESIS_PROFILE=thorough runs ten times more examples."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=150, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=1500, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("POOL_HYPOTHESIS_PROFILE", "ci"))
