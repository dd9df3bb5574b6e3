"""Size profiles: how big the notebooks' problems are, chosen with D2L_PROFILE."""
import os
from typing import TypeVar

T = TypeVar("T")

ENV_VAR = "D2L_PROFILE"
PROFILES = ("ci", "class", "full")
DEFAULT_PROFILE = "class"
# What each profile promises, shown by the hardware report and in errors.
DESCRIPTIONS = {"ci": "seconds per notebook, for CPU test runners",
                "class": "about a minute per notebook on a laptop",
                "full": "the book's problem sizes"}


def profile() -> str:
    """Return the active profile name: D2L_PROFILE, or 'class' when it is unset."""
    raw = os.environ.get(ENV_VAR, "")
    if (name := raw.strip().lower() or DEFAULT_PROFILE) not in PROFILES:
        choices = "; ".join(f"{p} ({DESCRIPTIONS[p]})" for p in PROFILES)
        raise ValueError(f"{ENV_VAR}={raw!r} is not a known profile. Set it to one of: "
                         f"{choices}. Unset, it means {DEFAULT_PROFILE!r}.")
    return name


def by_profile(ci: T, class_: T, full: T) -> T:
    """Return the value given for the active profile (ci, class or full)."""
    return (ci, class_, full)[PROFILES.index(profile())]
