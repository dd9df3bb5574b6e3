"""make readings: run the notebooks several times; list the printed readings whose words changed.

    python -m tools.report --runs 3 --out build/readings [NB ...]   # runs, then compares
    python -m tools.readings build/readings/run-1 build/readings/run-2 [DIR ...]

A reading is a line a code cell prints. Numbers and their units (12.5 ms, 1.52x, 40%) are masked so
that only the words count: "faster" against "within noise", and so are a profiler table's row
names. Each folder is a `make report` output (or a folder of executed notebooks); run times are
listed against the class budgets. Exit status 1 when a reading changed or a notebook failed.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from tools.alarms import output_texts
from tools.report import EXECUTED

BUDGET_S = {"class": (60.0, 90.0)}  # seconds: a notebook, the capstone (class profile)

UNIT = (r"ns|us|µs|ms|s|min|h|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB|[KMGT]?B/s|[KMGT]?FLOP/s|"
        r"FLOP/B|FLOPs?|samples/s|tokens/s|%|x|X|nats")
NUMBER = re.compile(
    r"(?<![\w.])[-+−]?(\d[\d,]*\.?\d*|\.\d+)(e[-+]?\d+)?(\s?(" + UNIT + r"))?(?![\w/])")
MULTIPLIER = re.compile(r"(?<![\w.])x(?=\d)")     # x1.23: the x goes with the number
ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def mask(line: str) -> str:
    """The words of a line: each number, with its unit, replaced by '#'."""
    line = ADDRESS.sub("#", line)
    line = MULTIPLIER.sub("", line.replace("±<", "±"))   # ±<1%: a spread, as ±3% is
    line = NUMBER.sub("#", line)
    line = re.sub(r"#(\s*[-–/]\s*#)+", "#", line)   # ranges: 40-100 -> #
    # A row of the profiler's table or of a listing that starts with the operator (aten::mm:
    # 6 calls ...): sorted by time, so which operator fills a row varies from run to run.
    if line.count("#") >= 4 or re.match(r"\s*aten::\w+:", line):
        line = re.sub(r"\baten::\w+", "aten::#", line)
    return " ".join(line.split())                     # columns padded to the numbers' width


def cell_lines(cell: dict) -> list[str]:
    """What a code cell printed: stdout lines and the text of its results."""
    texts = output_texts(cell.get("outputs", []), streams=("stdout",), errors=False)
    return [line for text in texts for line in text.splitlines() if line.strip()]


def readings(path: Path) -> dict[int, list[str]]:
    """{code cell index: printed lines} of an executed notebook."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    return {i: cell_lines(c) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"}


def changes(runs: list[dict[int, list[str]]]) -> dict[int, list[list[str]]]:
    """{cell: [the lines of each distinct variant]} for the cells whose masked words differ."""
    out = {}
    for cell in sorted(set().union(*runs)):
        variants: dict[tuple, list[str]] = {}
        for lines in (run.get(cell, []) for run in runs):
            variants.setdefault(tuple(map(mask, lines)), lines)
        if len(variants) > 1:
            out[cell] = list(variants.values())
    return out


def diff_lines(variants: list[list[str]]) -> list[str]:
    """The lines of each variant that not every variant shares (masked), marked by variant."""
    masked = [[mask(x) for x in v] for v in variants]
    shared = set.intersection(*(set(m) for m in masked))
    return [f"  [{k + 1}] {line}" for k, (v, m) in enumerate(zip(variants, masked))
            for line, words in zip(v, m) if words not in shared]


def compare(folders: list[Path]) -> tuple[list[str], int]:
    """Report lines, and how many cells changed, for executed notebooks in several folders."""
    names = sorted({p.name for f in folders for p in f.glob("*.ipynb")})
    report, changed = [], 0
    for name in names:
        paths = [f / name for f in folders]
        missing = [str(p.parent) for p in paths if not p.exists()]
        if missing:
            report.append(f"{name}: not in {', '.join(missing)}")
            continue
        found = changes([readings(p) for p in paths])
        changed += len(found)
        for cell, variants in found.items():
            report.append(f"{name} cell {cell}: {len(variants)} variants")
            report += diff_lines(variants)
    return report, changed


def budget_lines(seconds: dict[str, list[float]], profile: str) -> list[str]:
    """Each notebook's slowest run against its budget in this profile (if it has one)."""
    lines = []
    for name, times in seconds.items():
        limit = BUDGET_S.get(profile, (None, None))[name.startswith("09")]
        worst = max(times)
        over = f"  OVER the {limit:.0f} s budget" if limit and worst > limit else ""
        lines.append(f"{name}: " + ", ".join(f"{t:.1f}" for t in times) + f" s{over}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="make report outputs, or notebooks")
    folders = parser.parse_args(argv).folders
    if len(folders) < 2:
        parser.error("give two or more folders to compare")
    seconds: dict[str, list[float]] = {}
    failed, profile = [], ""
    for r, folder in enumerate(folders, 1):
        summary = folder / "summary.json"
        data = json.loads(summary.read_text()) if summary.is_file() else {"notebooks": []}
        profile = data.get("profile", profile)
        for nb in data["notebooks"]:
            seconds.setdefault(nb["notebook"], []).append(nb["seconds"])
            failed += [f"{nb['notebook']} (run {r}): {nb['error']}"] if nb["error"] else []
    print(f"run times ({profile}):", *budget_lines(seconds, profile), sep="\n")
    report, changed = compare([f / EXECUTED if (f / EXECUTED).is_dir() else f for f in folders])
    print("\n".join(report) if report else "")
    print(f"readings: {changed} cell(s) printed different words across {len(folders)} runs"
          + (f"; failed: {'; '.join(failed)}" if failed else ""))
    return 1 if changed or failed else 0


if __name__ == "__main__":
    sys.exit(main())
