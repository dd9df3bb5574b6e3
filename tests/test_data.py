"""Data loading: the Fashion-MNIST path (on files written here), the fallback to the digits."""
import struct
import time

import numpy as np
import pytest
import torch

import d2l_extras as dx
from d2l_extras import data as dxdata
from d2l_extras import report as dxreport


def write_idx(path, array):
    """Write an unsigned-byte IDX file (the MNIST format)."""
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}i", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def fake_fashion(root, n_train=12, n_test=6):
    folder = root / "FashionMNIST" / "raw"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    arrays = {}
    names = iter(dxdata.FASHION_FILES)  # images and labels of train, then of test
    for split, n in (("train", n_train), ("test", n_test)):
        X = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        y = rng.integers(0, 10, n, dtype=np.uint8)
        write_idx(folder / next(names), X)
        write_idx(folder / next(names), y)
        arrays[split] = (X, y)
    return arrays


def test_fashion_mnist_is_read_from_the_cache(tmp_path, capsys):
    arrays = fake_fashion(tmp_path)
    data = dx.load_images(10, 6, root=tmp_path, download=False)
    assert data.name == "fashion-mnist"
    assert "Fashion-MNIST" in capsys.readouterr().out
    X, y = data.train.tensors
    assert X.shape == (10, 1, 28, 28) and X.dtype == torch.float32 and y.dtype == torch.int64
    assert 0 <= X.min() and X.max() <= 1
    # Every image keeps its own label through the subset's shuffle.
    X_all, y_all = arrays["train"]
    for image, label in zip(X, y):
        i = int(np.argmax((X_all == np.round(image[0].numpy() * 255)).all(axis=(1, 2))))
        assert y_all[i] == label
    assert len(data.test) == 6


def test_source_fashion_mnist_without_files_says_where(tmp_path):
    with pytest.raises(FileNotFoundError, match="FashionMNIST"):
        dx.load_images(source="fashion-mnist", root=tmp_path, download=False)


def test_fallback_to_digits(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(dxreport, "_NOTICED", set())
    data = dx.load_images(100, 50, root=tmp_path, download=False)
    assert data.name == "digits"
    notice, line = capsys.readouterr().out.splitlines()
    assert notice == ("notice: Fashion-MNIST is not cached (downloads are switched off): "
                      "using scikit-learn's digits") == "notice: " + data.fallback
    assert "digits" in line and "100 training and 50 test" in line
    dx.load_images(100, 50, root=tmp_path, download=False)  # the notice is given once
    assert capsys.readouterr().out.splitlines() == [line]
    X, y = data.train.tensors
    assert X.shape == (100, 1, 28, 28) and set(y.tolist()) <= set(range(10))
    assert len(set(y.tolist())) == 10  # the subset mixes all classes


def test_offline_fallback_says_so_once_in_one_line(tmp_path, capsys, monkeypatch):
    # No network: one notice in plain words (no exception text), however often data is loaded,
    # and the network is asked once.
    monkeypatch.setattr(dxreport, "_NOTICED", set())
    probes = []

    def no_network(address, timeout):
        probes.append(address)
        raise OSError("Name or service not known")
    monkeypatch.setattr(dxdata.socket, "create_connection", no_network)
    for _ in range(3):
        data = dx.load_images(64, 32, root=tmp_path)
    out = capsys.readouterr().out.splitlines()
    notices = [line for line in out if line.startswith("notice:")]
    assert notices == ["notice: Fashion-MNIST could not be downloaded (no network): "
                       "using scikit-learn's digits"]
    assert len(out) == 4 and data.fallback and data.name == "digits" and len(probes) == 1
    assert dx.load_images(64, 32, source="digits", verbose=False).fallback == ""


def test_the_probe_answers_in_words(tmp_path, monkeypatch):
    # A host that cannot resolve: the probe answers with a reason, not a hang.
    monkeypatch.setattr(dxdata, "FASHION_HOST", "nonexistent.invalid")
    assert dxdata._download_fashion(tmp_path, 2) in ("no network", "no answer within 2 s")
    # A host that never answers: the probe gives up after its timeout.
    def silent(address, timeout):
        time.sleep(5)
        raise OSError("timed out")
    monkeypatch.setattr(dxdata.socket, "create_connection", silent)
    assert dxdata._download_fashion(tmp_path / "other", 1) == "no answer within 1 s"


def test_sizes_are_capped(tmp_path):
    data = dx.load_images(10**6, 10**6, root=tmp_path, download=False, verbose=False)
    assert len(data.train) + len(data.test) == 1797


def test_profile_sizes(monkeypatch):
    monkeypatch.setenv("D2L_PROFILE", "ci")
    assert dxdata.default_sizes() == (1024, 300)
    monkeypatch.setenv("D2L_PROFILE", "full")
    assert dxdata.default_sizes() == (60000, 10000)


def test_data_dir_env(monkeypatch, tmp_path):
    fake_fashion(tmp_path / "cache")
    monkeypatch.setenv("D2L_DATA_DIR", str(tmp_path / "cache"))
    assert dx.load_images(8, 4, download=False, verbose=False).name == "fashion-mnist"
    monkeypatch.delenv("D2L_DATA_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(FileNotFoundError, match=r"home/\.cache/d2l-extras/FashionMNIST/raw"):
        dx.load_images(source="fashion-mnist", download=False)


def test_loaders(tmp_path):
    data = dx.load_images(64, 32, root=tmp_path, download=False, verbose=False)
    train, test = data.loaders(16)
    X, y = next(iter(train))
    assert X.shape == (16, 1, 28, 28) and y.shape == (16,)
    assert sum(len(y) for _, y in test) == 32
