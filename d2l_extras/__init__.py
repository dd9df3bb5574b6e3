"""Shared helpers for the Computational Performance notebooks (d2l, chapter 12).

What a notebook teaches is written once, in its cell marked `#@save`; `make lib` generates it into
modules that say so (lessons.py, one module per torchrun job). The rest is written by hand. Names
load on first use (`dx.NAME`, `dx.MODULE.NAME`): a torchrun worker imports little, and
`python -m d2l_extras.ring` runs without runpy's warning about a module imported twice.
"""
import importlib

from . import _saved

# One module per concept, and its public names (what each is for: CONTRIBUTING.md, "Where things
# live"). A module with no names is listed for dx.MODULE.NAME.
_EXPORTS = {
    "checks": [], "bootstrap": ["setup"], "profiles": ["by_profile"], "sizes": ["problem_size"],
    "report": ["record"], "hardware": ["cuda_gpus", "default_device", "devices", "hardware_report"],
    "timing": ["format_seconds", "measure", "measure_interleaved", "synchronize"],
    "bands": ["Band", "check_prediction", "compare"],
    "plotting": ["bar_chart", "plot_roofline", "plot_timeline", "use_slide_style"],
    "compiler": ["last_level_cache", "maybe_compile"], "distributed": ["launch"],
    "profiling": ["busy_time", "profile_trace", "record_timeline"],
    "hwbench": ["dtype_supported", "one_thread_if_busy", "roofline"], "perfmodel": [],
    "memory": ["peak_memory"], "data": ["load_images"],
    "parallel": ["allow_tf32", "evaluate_accuracy"], "communication": ["ring_time", "speedup"],
    "ring": ["bus_bandwidth"], "kvstore": [],
    "transformer": ["TinyGPT", "capstone_job", "load_text"], "exercises": ["check"],
}
_OWNER = {name: module for module, names in _EXPORTS.items() for name in names}
_OWNER.update(_saved.NAMES)  # the generated modules' names: tools/save.py keeps this index
_MODULES = set(_EXPORTS) | set(_saved.NAMES.values())
__all__ = sorted(_OWNER)


def __getattr__(name: str):
    """Import a public name (or a module, as in dx.kvstore) the first time it is used."""
    if name in _MODULES:
        return importlib.import_module(f".{name}", __name__)
    if name not in _OWNER:
        raise AttributeError(f"module 'd2l_extras' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_OWNER[name]}", __name__), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_OWNER) | _MODULES)
