"""The set-up files agree with each other: one list of pins, used everywhere."""
import pathlib
import re

ROOT = pathlib.Path(__file__).parents[1]


def pins(name):
    lines = (ROOT / name).read_text().splitlines()
    return [l.strip() for l in lines if l.strip() and not l.lstrip().startswith("#")]


def test_every_requirement_is_pinned():
    for req in pins("requirements.txt") + pins("requirements-nodeps.txt"):
        assert re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[\w.+]+", req), f"not pinned: {req}"


def test_conda_environment_uses_the_same_pins():
    env = (ROOT / "environment.yml").read_text()
    assert "-r requirements.txt" in env and "requirements-nodeps.txt" in env


def test_readme_and_ci_use_the_same_test_command():
    readme, ci = (ROOT / "README.md").read_text(), (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme.split("\n## ")[0], "the README's top names `make test`"
    assert "make lab" in readme.split("\n## ")[0], "the README's top names `make lab`"
    assert re.search(r"^make test$", ci, re.M) and "D2L_PROFILE=ci" in ci
