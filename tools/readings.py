"""make readings: run the notebooks several times; list the printed readings whose words changed.

    python -m tools.readings [--profile class] [--runs 3] [--out build/readings] [NB ...]
    python -m tools.readings --compare DIR DIR [DIR ...]

A reading is a line a code cell prints. Numbers and their units (12.5 ms, 1.52x, 40%) are masked so
that only the words count: "faster" against "within noise". Each run is a `make report` run into
OUT/run-N; --compare reads such folders and runs nothing. Run times are listed against the class
budgets. Exit status 1 when a reading changed or a notebook failed.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from tools.alarms import output_texts
from tools.report import EXECUTED, ROOT, notebook_args, report

DEFAULT_OUT = ROOT / "build" / "readings"
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
        for run in runs:
            lines = run.get(cell, [])
            variants.setdefault(tuple(mask(x) for x in lines), lines)
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


def run(paths: list[Path], out: Path, profile: str, runs: int, cell_timeout: float) -> tuple:
    """Run the notebooks `runs` times (make report); return the folders, run times, failures."""
    # Bytecode written, as `make` does: without it every import of torch costs seconds.
    os.environ.update(D2L_PROFILE=profile, PYTHONDONTWRITEBYTECODE="")
    folders, seconds, failed = [], {}, []
    for r in range(1, runs + 1):
        print(f"readings: run {r}/{runs}", flush=True)
        report(paths, out / f"run-{r}", cell_timeout)
        folders.append(out / f"run-{r}" / EXECUTED)
        for nb in json.loads((out / f"run-{r}" / "summary.json").read_text())["notebooks"]:
            seconds.setdefault(nb["notebook"] + ".ipynb", []).append(nb["seconds"])
            if nb["error"]:
                failed.append(f"{nb['notebook']} (run {r}): {nb['error']}")
    return folders, seconds, failed


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
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    parser.add_argument("--profile", default=os.environ.get("D2L_PROFILE", "class"))
    parser.add_argument("--runs", type=int, default=3, help="one: keep it for a later --compare")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--cell-timeout", type=float, default=900)
    parser.add_argument("--compare", type=Path, nargs="+", metavar="DIR",
                        help="compare folders of executed notebooks; run nothing")
    args = parser.parse_args(argv)
    failed: list[str] = []
    if args.compare:
        if len(args.compare) < 2:
            parser.error("--compare needs two or more folders")
        folders = args.compare
    else:
        if args.runs < 1:
            parser.error("--runs must be 1 or more (one run: compare it later with --compare)")
        folders, seconds, failed = run(notebook_args(parser, args.notebooks),
                                       args.out.resolve() / args.profile, args.profile,
                                       args.runs, args.cell_timeout)
        print(f"\nrun times ({args.profile}):", *budget_lines(seconds, args.profile),
              sep="\n")
    if len(folders) < 2:
        print(f"readings: one run, in {folders[0]}; compare it with others: --compare DIR ...")
        return 1 if failed else 0
    report, changed = compare(folders)
    print("\n".join(report) if report else "")
    print(f"readings: {changed} cell(s) printed different words across {len(folders)} runs"
          + (f"; failed: {'; '.join(failed)}" if failed else ""))
    return 1 if changed or failed else 0


if __name__ == "__main__":
    sys.exit(main())
