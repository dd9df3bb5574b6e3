"""What a notebook needs to run from its own file on Colab, Kaggle or SageMaker Studio Lab.

Generated from pyproject.toml's repository address and version (the release tag) by
`python tools/nbmeta.py notebooks/*.ipynb`: the launch badges under the title, the set-up cell
(first code cell: installs the project with %pip where d2l_extras does not import, then
dx.setup()), the metadata that asks Colab and Kaggle for a GPU, and every figure of images/
embedded as a data URI (Colab ignores `attachment:` images; relative paths need the repository).
"""
from __future__ import annotations

import base64
import json
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "images"
LAUNCH, SETUP_TAG = "launch", "setup"
NO_SLIDE = "no-slide"  # the cell tag that keeps a cell out of the decks (tools/nbmeta.py)

# The platforms' own badges and their "open this GitHub file" addresses.
PLATFORMS = [
    ("Open In Colab", "https://colab.research.google.com/assets/colab-badge.svg",
     "https://colab.research.google.com/github/{repo}/blob/{tag}/{path}"),
    ("Open In Kaggle", "https://kaggle.com/static/images/open-in-kaggle.svg",
     "https://kaggle.com/kernels/welcome?src=https://github.com/{repo}/blob/{tag}/{path}"),
    ("Open In SageMaker Studio Lab", "https://studiolab.sagemaker.aws/studiolab.svg",
     "https://studiolab.sagemaker.aws/import/github/{repo}/blob/{tag}/{path}"),
]

# Ask for a GPU where the platform reads it from the notebook: Colab's T4, Kaggle's two T4s.
PLATFORM_METADATA = {"accelerator": "GPU", "colab": {"gpuType": "T4", "provenance": []},
                     "kaggle": {"accelerator": "nvidiaTeslaT4", "isGpuEnabled": True,
                                "isInternetEnabled": True, "language": "python",
                                "sourceType": "notebook"}}

# The set-up cell. Where d2l_extras does not import (a notebook alone on Colab, Kaggle or Studio
# Lab) it installs the project with --no-deps, so pip cannot replace the platform's torch; then
# dx.setup() (d2l_extras/bootstrap.py) checks Python and torch and installs what is missing.
# --ignore-requires-python lets an old Python reach dx.setup()'s message that says what to do.
SETUP = '''\
import importlib.util, os  # set-up: alone (Colab, Kaggle), install d2l_extras
if not importlib.util.find_spec("d2l_extras"):
    repo = "@URL@"
    src = os.environ.get("D2L_EXTRAS_SOURCE", f"{repo}/archive/@TAG@.zip")
    %pip install -q --no-deps --ignore-requires-python "{src}"
import d2l_extras as dx; dx.setup()  # checks Python, torch; installs the rest
'''


def project() -> dict:
    """The repository ('owner/name'), its address and the release tag, from pyproject.toml."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    url = meta["urls"]["Repository"].rstrip("/")
    match = re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+)", url)
    if not match:
        raise ValueError(f"[project.urls] Repository must be https://github.com/OWNER/NAME, "
                         f"not {url!r}: the launch badges open GitHub files")
    return {"url": url, "repo": match.group(1), "tag": "v" + meta["version"]}


def badges(path: str, info: dict | None = None) -> str:
    """Markdown with the three launch badges for the repository file `path`."""
    info = info or project()
    return " ".join(f"[![{alt}]({image})]({target.format(path=path, **info)})"
                    for alt, image, target in PLATFORMS)


def setup_source(info: dict | None = None) -> str:
    """The source of the set-up cell, installing the release archive by default."""
    info = info or project()
    return SETUP.replace("@URL@", info["url"]).replace("@TAG@", info["tag"]).rstrip("\n")


_DATA_FIGURE = re.compile(r"!\[([^\]]*)\]\((?:\.\./images/([\w.-]+\.png)"
                          r"|data:image/png;base64,[A-Za-z0-9+/=]+)\)")


def source_text(cell: dict) -> str:
    """A cell's source as one string, whether stored as lines (JSON) or text (nbformat)."""
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def embed_figures(cell: dict, images: Path = IMAGES) -> None:
    """Embed each `![caption](../images/NAME.png)` of a Markdown cell as a data URI, naming the
    files in its metadata; an embedded figure is refreshed from the file its metadata names."""
    names = list(cell.get("metadata", {}).get("figures", []))
    used: list[str] = []

    def embed(match: re.Match) -> str:
        name = match.group(2) or (names[len(used)] if len(used) < len(names) else None)
        if name is None or not (images / name).is_file():
            raise ValueError(f"figure {name or '(unnamed)'} is not in {images}: "
                             "write it as ![caption](../images/NAME.png)")
        used.append(name)
        data = base64.b64encode((images / name).read_bytes()).decode("ascii")
        return f"![{match.group(1)}](data:image/png;base64,{data})"

    text = isinstance(cell["source"], str)  # nbformat's nodes hold text, stored files lines
    new = _DATA_FIGURE.sub(embed, source_text(cell))
    if used:
        cell["source"] = new if text else new.splitlines(keepends=True)
        cell.setdefault("metadata", {})["figures"] = used


def _cell(kind: str, source: str, tags: list[str], cell_id: str | None) -> dict:
    cell = {"cell_type": kind, "metadata": {"tags": tags},
            "source": source.splitlines(keepends=True)}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    if cell_id:  # nbformat 4.5 and later give every cell an id
        cell["id"] = cell_id
    return cell


def apply(nb: dict, path: str, info: dict | None = None) -> dict:
    """Add or refresh the launch badges, the set-up cell, the GPU metadata and the figures."""
    info = info or project()
    cells, ids = nb["cells"], nb.get("nbformat_minor", 0) >= 5
    launch = _cell("markdown", badges(path, info), [LAUNCH, NO_SLIDE], ids and "launch")
    setup = _cell("code", setup_source(info), [SETUP_TAG, NO_SLIDE], ids and "setup")
    for new, tag, where in ((launch, LAUNCH, 1), (setup, SETUP_TAG, None)):
        old = next((c for c in cells if tag in c.get("metadata", {}).get("tags", [])), None)
        if old is not None:
            old["source"] = new["source"]
            continue
        if where is None:  # before the first code cell
            where = next((i for i, c in enumerate(cells) if c["cell_type"] == "code"),
                         len(cells))
        cells.insert(where, new)
    for cell in cells:
        if cell.get("cell_type") == "markdown":
            embed_figures(cell)
    nb.setdefault("metadata", {}).update(PLATFORM_METADATA)
    return nb


README_START, README_END = "<!-- launch badges: start -->", "<!-- launch badges: end -->"


def title_of(nb: dict) -> str:
    """A notebook's first Markdown heading (stored JSON or an nbformat node), or ''."""
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for line in source_text(cell).splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return ""


def readme_table(notebooks: list[Path], info: dict | None = None) -> str:
    """The README's table of launch badges, one row per notebook (from its first heading)."""
    rows = ["| notebook | open it with a free GPU |", "| --- | --- |"] + [
        f"| {path.stem[:2]} {title_of(json.loads(path.read_text(encoding='utf-8'))) or path.stem}"
        f" | {badges(path.resolve().relative_to(ROOT).as_posix(), info or project())} |"
        for path in notebooks]
    return "\n".join(rows)


def update_readme(text: str, notebooks: list[Path], info: dict | None = None) -> str:
    """`text` (the README) with the table between the launch-badge markers regenerated."""
    return replace_block(text, README_START, README_END, readme_table(notebooks, info))


def replace_block(text: str, start_mark: str, end_mark: str, block: str) -> str:
    """`text` with what stands between two marker lines replaced by `block`."""
    start, end = text.find(start_mark), text.find(end_mark)
    if start < 0 or end < start:
        raise ValueError(f"README.md has no {start_mark} ... {end_mark} block")
    return f"{text[:start]}{start_mark}\n{block}\n{text[end:]}"
