"""Suite-wide settings."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

# Correctness, not speed, is what the property tests check: timing limits only make them flaky
# on a loaded 2-core machine. Speed targets live in bench/.
settings.register_profile(
    "cursor-byok", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("cursor-byok")
