"""pytest plugin (loaded by the root conftest.py): nbval fails a notebook cell that prints an alarm line.

An alarm line (tools/alarms.py: "ERROR: ... gpuGetDeviceCount failed", "USDT: ...",
"No CUDA runtime is found, using CUDA_HOME=...") looks like a failure to a student although the
notebook worked. The check reads the outputs nbval has already collected: no extra run.

It also keeps each notebook nbval ran without a failure, outputs included, in a temporary
folder that pytest-xdist's workers share (`executed_folder`): tests/test_decks.py cuts its
decks from those, and tests/test_hosted.py compares its lone run with one, instead of running
the notebooks a second time.
"""
from __future__ import annotations

import copy
import functools
import os
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest

from tools.alarms import ALARM_PATTERNS, alarm_lines
from tools.report import records_source

# ipykernel forwards what C++ code writes to file descriptors 1 and 2 (the profiler's "USDT:" and
# "ERROR:" lines) into the cell's output, as Jupyter shows it to a student, except when it sees
# PYTEST_CURRENT_TEST in its environment (ipykernel/iostream.py). nbval starts its kernel from
# inside a test, so the kernel inherits that variable; we start it without.
HIDDEN_FROM_KERNEL = ("PYTEST_CURRENT_TEST",)


def explain(found: list[tuple[str, str]]) -> str:
    """Return a readable message: each alarm line with why it appears and what to do."""
    why = {name: reason for name, _, reason in ALARM_PATTERNS}
    return "\n".join(f"  {line}\n    ({name}: {why[name]})" for name, line in found)


def kernel_env(environ: dict | None = None) -> dict:
    """Return the environment for a notebook kernel: this one, less what hides fd output."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if k not in HIDDEN_FROM_KERNEL}


def pytest_configure(config):
    # The folder of kept runs: this process's own, or under pytest-xdist the controller's, which
    # the workers inherit through RUNS_ENV (they start after this hook), so that a test on one
    # worker can read what nbval ran on the other.
    if hasattr(config, "workerinput") and os.environ.get(RUNS_ENV):
        _FOLDER.append(Path(os.environ[RUNS_ENV]))
    else:
        _FOLDER.append(Path(tempfile.mkdtemp(prefix="d2l-nbval-")))
        _OWNED.append(_FOLDER[-1])
        os.environ[RUNS_ENV] = str(_FOLDER[-1])
    try:
        import nbval.kernel
    except ImportError:  # nbval absent: no notebooks run, nothing to patch
        return
    start = nbval.kernel.start_new_kernel
    if getattr(start, "_d2l_env_patched", False):
        return

    @functools.wraps(start)
    def start_new_kernel(*args, **kwargs):
        kwargs.setdefault("env", kernel_env())
        return start(*args, **kwargs)

    start_new_kernel._d2l_env_patched = True
    nbval.kernel.start_new_kernel = start_new_kernel

    # Keep every iopub message a cell's run reads: nbval's own outputs ignore clear_output (the
    # book's Animator redraws a figure that way), which Jupyter and the decks honour.
    from nbval.plugin import IPyNbFile
    get = IPyNbFile.get_kernel_message

    @functools.wraps(get)
    def get_kernel_message(self, *args, **kwargs):
        msg = get(self, *args, **kwargs)
        getattr(self, "_d2l_messages", []).append(msg)
        return msg

    IPyNbFile.get_kernel_message = get_kernel_message

    # Each notebook's records (notebooks/records/, run by make report after its last cell) run
    # here too, as one more cell, so that a record that no longer fits its notebook fails a test.
    collect = IPyNbFile.collect

    @functools.wraps(collect)
    def collect_with_records(self):
        cells = list(collect(self))
        yield from cells
        records = records_source(Path(str(self.fspath)))
        if records:
            import nbformat
            from nbval.plugin import IPyNbCell
            yield IPyNbCell.from_parent(self, name="Cell records", cell_num=len(cells),
                                        cell=nbformat.v4.new_code_cell(records),
                                        options=defaultdict(bool, check=False))

    IPyNbFile.collect = collect_with_records


# Under pytest-xdist (`make test` runs two workers) the notebooks and the deck test, which
# reuses nbval's runs of them (executed_folder), share one worker, in collection order: notebooks
# first. Every other test goes to whichever worker is free. (xdist's own xdist_group mark cannot
# do this under pytest 9: it renames the item, which pytest 9 no longer allows.)
SAME_WORKER = (".ipynb::", "tests/test_decks.py::", "tests/test_lessons.py::")
# The longest test starts first on the other worker, so that neither ends long after the other;
# the notebook it runs alone goes first on the notebooks' worker, so that nbval's run of it (its
# reference) is ready before the lone run is done.
LONGEST_FIRST = "tests/test_hosted.py::test_a_lone_notebook_runs_on_a_hosted_stack"
LONE_NOTEBOOK = "06-multiple-gpus-from-scratch.ipynb"


def worker_scope(nodeid: str) -> str:
    """The unit xdist hands to one worker: 'notebooks' for those that share one, else the test."""
    return "notebooks" if any(part in nodeid for part in SAME_WORKER) else nodeid


def pytest_collection_modifyitems(config, items):
    # The order work is handed out in: the lone notebook, the other notebooks, the longest test,
    # then the rest as collected.
    items.sort(key=lambda item: 0 if f"/{LONE_NOTEBOOK}::" in item.nodeid else
               1 if ".ipynb::" in item.nodeid else 2 if item.nodeid.startswith(LONGEST_FIRST) else 3)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class NotebooksTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_scope(nodeid)

    return NotebooksTogether(config, log)


def outputs_from_messages(messages: list[dict]) -> list:
    """A cell's outputs as Jupyter shows them: streams joined, clear_output honoured."""
    import nbformat
    ours = next((m["parent_header"].get("msg_id") for m in messages
                 if m.get("msg_type") == "execute_input"), None)
    outputs, clear = [], False
    for msg in messages:
        kind = msg.get("msg_type")
        if ours is not None and msg.get("parent_header", {}).get("msg_id") != ours:
            continue
        if kind == "clear_output":
            clear = bool(msg["content"].get("wait"))
            if not clear:
                outputs.clear()
            continue
        if kind not in ("stream", "display_data", "execute_result", "error"):
            continue
        if clear:
            outputs, clear = [], False
        out = nbformat.v4.output_from_msg(msg)
        if kind == "stream" and outputs and outputs[-1].get("name") == out.name:
            outputs[-1].text += out.text
        else:
            outputs.append(out)
    return outputs


_EXECUTED: dict = {}  # IPyNbFile -> its notebook with the outputs so far, None once a cell failed
_FOLDER: list[Path] = []  # where finished runs are kept
_OWNED: list[Path] = []   # the folder this process made, and removes at the end
RUNS_ENV = "D2L_NBVAL_RUNS"


def executed_folder(notebooks: list[Path]) -> Path | None:
    """The folder of the notebooks nbval ran in this session (on any xdist worker), if it ran
    every one of them."""
    if _FOLDER and all((_FOLDER[-1] / p.name).is_file() for p in notebooks):
        return _FOLDER[-1]
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    result = yield
    notebook = getattr(item, "parent", None)
    if notebook in _EXECUTED and (nextitem is None or nextitem.parent is not notebook):
        executed = _EXECUTED.pop(notebook)
        if executed is not None:
            import nbformat
            target = _FOLDER[-1] / Path(str(notebook.fspath)).name
            nbformat.write(executed, f"{target}.tmp")
            os.replace(f"{target}.tmp", target)  # whole: another worker may be reading
    return result


def _keep(item, outputs) -> None:
    """Put a cell's outputs into the executed copy of its notebook (None: it failed)."""
    notebook = item.parent
    if notebook not in _EXECUTED:
        _EXECUTED[notebook] = copy.deepcopy(notebook.nb)
    executed = _EXECUTED[notebook]
    if executed is None:
        return
    if outputs is None:
        _EXECUTED[notebook] = None
        return
    index = next((i for i, c in enumerate(notebook.nb.cells) if c is item.cell), None)
    if index is None:  # the records, which are not part of the notebook
        return
    if _quiet(item.cell.source):
        outputs = [o for o in outputs if o.get("output_type") != "execute_result"]
    executed.cells[index].outputs = outputs  # built afresh for this copy


def _quiet(source: str) -> bool:
    """Whether a trailing ';' hides the cell's value in Jupyter. nbval runs cells outside the
    kernel's history, where IPython looks for that ';', so nbval's outputs keep the value."""
    from IPython.core.displayhook import DisplayHook
    from IPython.core.inputtransformer2 import TransformerManager
    try:
        code = TransformerManager().transform_cell(source)
        return bool(DisplayHook.semicolon_at_end_of_expression(code))
    except Exception:  # tokenize's errors on code that would not run anyway
        return False


def pytest_unconfigure(config):
    for folder in _OWNED:
        shutil.rmtree(folder, ignore_errors=True)
        if os.environ.get(RUNS_ENV) == str(folder):
            del os.environ[RUNS_ENV]
    _FOLDER.clear()
    _OWNED.clear()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    is_cell = hasattr(item, "raise_cell_error") and hasattr(item, "cell")
    if is_cell:
        item.parent._d2l_messages = []
    try:
        result = yield  # the cell ran without error (an error would have been raised here)
    except BaseException:
        if is_cell:
            _keep(item, None)
        raise
    # nbval's IPyNbCell keeps the cell's outputs (stdout, stderr, displays) in test_outputs.
    outputs = getattr(item, "test_outputs", None)
    if is_cell:
        _keep(item, outputs_from_messages(item.parent.__dict__.pop("_d2l_messages", [])))
    if outputs and is_cell:
        found = alarm_lines(outputs)
        if found:
            _keep(item, None)
            item.raise_cell_error(
                f"The cell printed {len(found)} alarm line(s): text that looks like a failure "
                "to a student. Stop the cause (patterns and reasons: tools/alarms.py):",
                "\n" + explain(found))
    return result
