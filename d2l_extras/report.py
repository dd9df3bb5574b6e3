"""Figures a notebook measured, handed to `make report` (and to nothing else).

A notebook calls `dx.record("fusion_speedup", 6.9, "x", "compiled vs eager, 4M floats")` right
where it prints a measured number. Outside `make report` this only returns the value: nothing is
written, so running a notebook leaves the repository untouched. Under `make report` the variable
D2L_REPORT_DIR names a directory (outside the repository, or the ignored build/), and each call
appends one JSON line to `records.jsonl` there, which the report's summary reads.
"""
import json
import math
import os
import time
from pathlib import Path

ENV_VAR = "D2L_REPORT_DIR"
RECORDS = "records.jsonl"


def record(key: str, value: float, unit: str, note: str = "", notebook: str | None = None) -> float:
    """Hand one measured figure to `make report` (no-op without D2L_REPORT_DIR); return it."""
    if not isinstance(key, str) or not key.isidentifier():
        raise ValueError(f"record(): key must be a short identifier such as 'fusion_speedup', "
                         f"got {key!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"record({key!r}): value must be a finite number that was measured, "
                         f"got {value!r}")
    target = os.environ.get(ENV_VAR, "").strip()
    if target:
        row = {"key": key, "value": float(value), "unit": unit, "note": note,
               "notebook": notebook or os.environ.get("D2L_REPORT_NOTEBOOK", ""),
               "time": time.time()}
        path = Path(target)
        path.mkdir(parents=True, exist_ok=True)
        with open(path / RECORDS, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
    return value


def read_records(directory: str | os.PathLike) -> list[dict]:
    """Return the figures recorded under `directory`, in the order they were recorded."""
    path = Path(directory) / RECORDS
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


_NOTICED: set[str] = set()


def notice(message: str) -> bool:
    """Print a one-line notice the first time it is given in this process; True if printed."""
    if not isinstance(message, str) or not message.strip():
        raise ValueError(f"notice(): message must be a non-empty string, got {message!r}")
    # One line, whatever the caller passed (an exception's text often spans several).
    line = " ".join(message.split())
    if line in _NOTICED:
        return False
    _NOTICED.add(line)
    print(f"notice: {line}")
    return True
