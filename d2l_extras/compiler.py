"""Whether torch.compile can build code here, and a fallback to eager when it cannot."""
from __future__ import annotations

import functools
from typing import Callable, TypeVar

import torch

F = TypeVar("F", bound=Callable)


@functools.cache
def compile_support() -> tuple[bool, str]:
    """Compile a tiny function once; return (works, reason) so notebooks can explain a failure."""
    try:
        fn = torch.compile(lambda x: torch.relu(x) * 2 + 1)
        x = torch.randn(8)
        torch.testing.assert_close(fn(x), torch.relu(x) * 2 + 1)
        return True, "torch.compile works on this machine"
    except Exception as err:  # a missing C++ compiler shows up only here, at the first call
        return False, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"


def maybe_compile(fn: F, **options) -> F:
    """Return torch.compile(fn, **options), or fn itself (with a notice) where compiling fails."""
    works, reason = compile_support()
    if works:
        return torch.compile(fn, **options)
    print(f"torch.compile is not usable here ({reason}); running eagerly instead. "
          "On Windows install the MSVC build tools, on macOS the Xcode command line tools.")
    return fn
