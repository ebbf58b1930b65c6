"""The expected verdicts of dp-pause's later-release variants (``releases.py``): those added to the
instances the v0.20.0/v0.21.0 variants share, and the instances only the later releases have."""

from __future__ import annotations

from dataclasses import replace

from lockstep.models.dp_pause.releases import V0_25_0, V0_29_0, V0_33_0
from lockstep.spec.protocol import InstanceSpec

# instance -> {variant: verdict} for the shared instances
SHARED: dict[str, dict[str, str]] = {}

RELEASE_INSTANCES: tuple[InstanceSpec, ...] = ()


def with_release_verdicts(*instances: InstanceSpec) -> tuple[InstanceSpec, ...]:
    """The shared instances with the later releases' verdicts added, then the later releases' own."""
    merged = tuple(
        replace(instance, expected={**instance.expected, **SHARED.get(instance.name, {})}) for instance in instances
    )
    return merged + RELEASE_INSTANCES


__all__ = ["V0_25_0", "V0_29_0", "V0_33_0", "with_release_verdicts"]
