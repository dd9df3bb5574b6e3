"""Figures a notebook measured, for `make report` only (written where D2L_REPORT_DIR says, else
nowhere: a run leaves the repository untouched); and one-line notices."""
import json
import math
import os
import time
from pathlib import Path

ENV_VAR = "D2L_REPORT_DIR"
RECORDS = "records.jsonl"


def record(key: str, value: float, unit: str, note: str = "") -> float:
    """Hand one measured figure to `make report` (no-op without D2L_REPORT_DIR); return it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"record({key!r}): value must be a finite number that was measured, "
                         f"got {value!r}")
    target = os.environ.get(ENV_VAR, "").strip()
    if target:
        row = {"key": key, "value": float(value), "unit": unit, "note": note, "time": time.time(),
               "notebook": os.environ.get("D2L_REPORT_NOTEBOOK", "")}  # tools/report.py sets it
        Path(target).mkdir(parents=True, exist_ok=True)
        with open(Path(target) / RECORDS, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
    return value


def read_records(directory: str | os.PathLike) -> list[dict]:
    """Return the figures recorded under `directory`, in the order they were recorded."""
    path = Path(directory) / RECORDS
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.strip()]


_NOTICED: set[str] = set()


def notice(message: str) -> bool:
    """Print a one-line notice the first time it is given in this process; True if printed."""
    # One line, whatever the caller passed (an exception's text often spans several).
    line = " ".join(message.split())
    if line in _NOTICED:
        return False
    _NOTICED.add(line)
    print(f"notice: {line}")
    return True
