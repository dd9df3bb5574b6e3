"""dx.record writes nothing unless make report asks for it, and refuses what was not measured."""
import json

import pytest

import d2l_extras as dx


def test_record_is_a_no_op_without_the_variable(monkeypatch, tmp_path):
    monkeypatch.delenv("D2L_REPORT_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert dx.record("fusion_speedup", 6.9, "x") == 6.9
    assert list(tmp_path.iterdir()) == []


def test_records_are_appended_in_order(monkeypatch, tmp_path):
    monkeypatch.setenv("D2L_REPORT_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("D2L_REPORT_NOTEBOOK", "01")
    dx.record("a", 1, "s", "first")
    dx.record("b", 2.5, "GB/s")
    rows = dx.report.read_records(tmp_path / "run")
    assert [(r["key"], r["value"], r["unit"]) for r in rows] == [("a", 1.0, "s"), ("b", 2.5, "GB/s")]
    assert rows[0]["note"] == "first" and rows[0]["notebook"] == "01"
    json.loads((tmp_path / "run" / "records.jsonl").read_text().splitlines()[1])


def test_reading_an_empty_directory_gives_nothing(tmp_path):
    assert dx.report.read_records(tmp_path) == []


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "3", True, None])
def test_values_that_were_not_measured_are_refused(value):
    with pytest.raises(ValueError, match="finite number"):
        dx.record("x", value, "s")


def test_a_notice_prints_once_on_one_line(capsys):
    message = "Fashion-MNIST could not be downloaded:\n  using digits (test_report)"
    assert dx.report.notice(message) is True
    assert dx.report.notice(message) is False
    assert dx.report.notice(" ".join(message.split())) is False  # the same line, however wrapped
    out = capsys.readouterr().out
    assert out == "notice: Fashion-MNIST could not be downloaded: using digits (test_report)\n"
