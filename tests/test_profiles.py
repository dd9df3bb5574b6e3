import pytest

import d2l_extras as dx


def test_default_is_class(monkeypatch):
    monkeypatch.delenv("D2L_PROFILE", raising=False)
    assert dx.profiles.profile() == "class"


@pytest.mark.parametrize("name", ["ci", "class", "full", " CI "])
def test_known_profiles(monkeypatch, name):
    monkeypatch.setenv("D2L_PROFILE", name)
    assert dx.profiles.profile() == name.strip().lower()


def test_unknown_profile_lists_the_valid_ones(monkeypatch):
    monkeypatch.setenv("D2L_PROFILE", "huge")
    with pytest.raises(ValueError, match="'huge'.*ci.*class.*full"):
        dx.profiles.profile()


@pytest.mark.parametrize("name, expected", [("ci", 1), ("class", 2), ("full", 3)])
def test_by_profile_picks_the_active_value(monkeypatch, name, expected):
    monkeypatch.setenv("D2L_PROFILE", name)
    assert dx.by_profile(1, 2, 3) == expected
