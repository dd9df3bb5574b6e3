"""Training data: Fashion-MNIST when it is cached or downloadable, else scikit-learn's digits.

Downloads go to a user cache (D2L_DATA_DIR, else ~/.cache/d2l-extras), never into the repository.
Without internet (CI runners, this project's sandbox) the probe gives up after a few seconds and
the notebooks train on the 1,797 handwritten digits that scikit-learn ships, resized to 28x28.
"""
from __future__ import annotations

import gzip
import importlib.util
import os
import pathlib
import socket
import tempfile
import threading
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, Subset, TensorDataset

from .checks import whole_number
from .profiles import by_profile
from .report import notice as _notice

DATA_ENV = "D2L_DATA_DIR"
SOURCES = ("auto", "fashion-mnist", "digits")
FASHION_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
                 "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
FASHION_HOST = "fashion-mnist.s3-website.eu-central-1.amazonaws.com"
FASHION_LABELS = ("t-shirt", "trouser", "pullover", "dress", "coat",
                  "sandal", "shirt", "sneaker", "bag", "ankle boot")
DIGITS_TEST = 300  # the digits are split once, with a fixed seed: 1,497 train, 300 test


def data_dir() -> pathlib.Path:
    """Return where datasets are cached: $D2L_DATA_DIR, else ~/.cache/d2l-extras."""
    raw = os.environ.get(DATA_ENV, "").strip()
    return pathlib.Path(raw).expanduser() if raw else pathlib.Path.home() / ".cache" / "d2l-extras"


def default_sizes() -> tuple[int, int]:
    """Return (train, test) subset sizes of the active profile."""
    return by_profile((1024, 300), (12000, 2000), (60000, 10000))


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (the MNIST format; gzip-compressed when the name ends in .gz)."""
    path = pathlib.Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    # Header: two zero bytes, a type code (0x08 = unsigned byte), the number of dimensions,
    # then one big-endian int32 per dimension.
    if len(data) < 4 or data[:2] != b"\x00\x00" or data[2] != 0x08:
        raise ValueError(f"{path} is not an IDX file of unsigned bytes (bad magic number "
                         f"{data[:4].hex() or 'empty'}; expected 0000 08 followed by ndim)")
    ndim = data[3]
    shape = tuple(int(d) for d in np.frombuffer(data, ">i4", count=ndim, offset=4))
    expected = 4 + 4 * ndim + int(np.prod(shape))
    if len(data) != expected:
        raise ValueError(f"{path} holds {len(data)} bytes, but its header {shape} "
                         f"needs {expected}: the file is truncated or corrupt")
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _find(folder: pathlib.Path, name: str) -> pathlib.Path | None:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.exists():
            return candidate
    return None


def _fashion_folder(root: pathlib.Path) -> pathlib.Path:
    # torchvision's own layout, so a copy torchvision downloaded is found as well.
    return root / "FashionMNIST" / "raw"


def _read_fashion(root: pathlib.Path) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
    folder = _fashion_folder(root)
    found = {split: [_find(folder, n) for n in names] for split, names in FASHION_FILES.items()}
    if any(p is None for paths in found.values() for p in paths):
        return None
    out = {}
    for split, (images, labels) in found.items():
        X, y = read_idx(images), read_idx(labels)
        if X.ndim != 3 or y.ndim != 1 or len(X) != len(y):
            raise ValueError(f"{images.name} {X.shape} and {labels.name} {y.shape} do not form "
                             "a set of images with one label each")
        out[split] = (X, y)
    return out


def _reachable(host: str, timeout: float) -> str | None:
    """Return None when host:80 answers within timeout, else the reason it did not, in words."""
    outcome: list[str | None] = ["no answer within %.0f s" % timeout]

    def probe() -> None:
        try:  # name resolution ignores socket timeouts, hence the thread
            with socket.create_connection((host, 80), timeout=timeout):
                outcome[0] = None
        except OSError:  # the name does not resolve, the route or the port is closed
            outcome[0] = "no network"

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return outcome[0]


_OFFLINE: list[str] = []  # why the last probe failed: ask the network once per process


def _download_fashion(root: pathlib.Path, timeout: float) -> str | None:
    """Download Fashion-MNIST with torchvision; return None on success, else why not."""
    if _OFFLINE:
        return _OFFLINE[0]
    reason = _reachable(FASHION_HOST, timeout)
    if reason:
        _OFFLINE.append(reason)
        return reason
    previous = socket.getdefaulttimeout()
    try:
        import torchvision  # imported only here: it takes seconds to import

        socket.setdefaulttimeout(max(timeout, 30))  # a stalled transfer must not hang the notebook
        for train in (True, False):
            torchvision.datasets.FashionMNIST(str(root), train=train, download=True)
        return None
    except Exception:  # any failure means: use the fallback, and say so in a few words
        return "the download failed"
    finally:
        socket.setdefaulttimeout(previous)


def _digits_file() -> pathlib.Path | None:
    # Reading sklearn's CSV directly avoids importing scikit-learn (seconds) in every worker.
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / \
        "digits.csv.gz"
    return path if path.exists() else None


def _read_digits() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    path = _digits_file()
    if path is not None:
        table = np.loadtxt(path, delimiter=",")
        images, labels = table[:, :-1].reshape(-1, 8, 8), table[:, -1]
    else:
        from sklearn.datasets import load_digits  # a layout we do not know: ask sklearn

        digits = load_digits()
        images, labels = digits.images, digits.target
    # 8x8 pixels with values 0..16 -> 28x28 in [0, 255], the shape and range Fashion-MNIST has.
    small = torch.tensor(images, dtype=torch.float32).unsqueeze(1) / 16
    big = F.interpolate(small, size=(28, 28), mode="bilinear", align_corners=False)
    X = (big.squeeze(1).clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    y = labels.astype(np.uint8)
    order = np.random.default_rng(0).permutation(len(X))
    test, train = order[:DIGITS_TEST], order[DIGITS_TEST:]
    return {"train": (X[train], y[train]), "test": (X[test], y[test])}


@dataclass
class ImageData:
    """Images (N, 1, 28, 28) in [0, 1] with int64 labels, and which dataset they came from."""

    name: str
    train: TensorDataset
    test: TensorDataset
    notice: str       # the one-line description load_images prints
    fallback: str = ""  # why Fashion-MNIST was not used, when it was asked for ("" otherwise)

    def loaders(self, batch_size: int, shuffle: bool = True, seed: int = 0
                ) -> tuple[DataLoader, DataLoader]:
        """Return (train, test) DataLoaders; the training order is reproducible from seed."""
        whole_number(batch_size, "batch_size")
        generator = torch.Generator().manual_seed(seed)
        return (DataLoader(self.train, batch_size, shuffle=shuffle, generator=generator),
                DataLoader(self.test, batch_size, shuffle=False))


def _subset(X: np.ndarray, y: np.ndarray, n: int) -> TensorDataset:
    # A fixed permutation, so every subset size keeps the classes mixed.
    keep = np.random.default_rng(1).permutation(len(X))[:n]
    images = torch.from_numpy(X[keep].astype(np.float32) / 255).unsqueeze(1)
    return TensorDataset(images, torch.from_numpy(y[keep].astype(np.int64)))


def load_images(n_train: int | None = None, n_test: int | None = None, source: str = "auto",
                root: str | os.PathLike | None = None, download: bool = True,
                timeout: float = 5.0, verbose: bool = True) -> ImageData:
    """Load Fashion-MNIST (cached or downloaded), else the digits; print which, in one line."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    default_train, default_test = default_sizes()
    n_train, n_test = n_train or default_train, n_test or default_test
    n_train, n_test = whole_number(n_train, "n_train"), whole_number(n_test, "n_test")
    root = pathlib.Path(root) if root is not None else data_dir()
    arrays, why = None, ""
    if source in ("auto", "fashion-mnist"):
        arrays = _read_fashion(root)
        if arrays is None and download:
            why = _download_fashion(root, timeout) or ""
            arrays = None if why else _read_fashion(root)
        elif arrays is None:
            why = "downloads are switched off"
        if arrays is None and source == "fashion-mnist":
            raise FileNotFoundError(
                f"Fashion-MNIST is not in {_fashion_folder(root)} ({why}). Download it there "
                f"(or set {DATA_ENV}), or use source='auto' to fall back to the digits.")
    fallback = ""
    if arrays is not None:
        name = "fashion-mnist"
        head = f"Data: Fashion-MNIST from {_fashion_folder(root)}"
    else:
        arrays, name = _read_digits(), "digits"
        head = "Data: scikit-learn's handwritten digits (8x8, resized to 28x28)"
        if why:  # a fixed sentence, so that notice() says it once per process
            fallback = (f"Fashion-MNIST could not be downloaded ({why}): using scikit-learn's "
                        f"digits" if download else
                        f"Fashion-MNIST is not cached ({why}): using scikit-learn's digits")
    (X_train, y_train), (X_test, y_test) = arrays["train"], arrays["test"]
    train = _subset(X_train, y_train, min(n_train, len(X_train)))
    test = _subset(X_test, y_test, min(n_test, len(X_test)))
    notice = f"{head}; {len(train)} training and {len(test)} test images."
    if verbose:
        if fallback:
            _notice(fallback)  # "notice: ...", the first time in this process only
        print(notice)
    return ImageData(name, train, test, notice, fallback)


def load_data(batch_size: int, n_train: int | None = None, n_test: int | None = None,
              source: str = "auto", seed: int = 0) -> tuple[DataLoader, DataLoader]:
    """Return (train, test) DataLoaders of 28x28 images, like d2l.load_data_fashion_mnist."""
    return load_images(n_train, n_test, source).loaders(batch_size, seed=seed)


def book_fashion_mnist(batch_size: int, n_train: int | None = None, n_test: int | None = None,
                       root: str | os.PathLike | None = None
                       ) -> tuple[DataLoader, DataLoader] | None:
    """The book's d2l.load_data_fashion_mnist on the cached files; None when they are not there.

    The book's loader reads (and downloads into) "../data", relative to where Python runs: in a
    notebook that is inside the repository. Here it runs in a temporary folder whose "../data"
    links to the cache, so it reads the files load_images found and writes nothing. The
    profile's subset sizes apply, as for load_images.
    """
    whole_number(batch_size, "batch_size")
    default_train, default_test = default_sizes()
    n_train = whole_number(n_train or default_train, "n_train")
    n_test = whole_number(n_test or default_test, "n_test")
    root = pathlib.Path(root) if root is not None else data_dir()
    folder = _fashion_folder(root)
    # torchvision wants the unpacked files; without them it would try to download.
    if not all((folder / name).exists() for names in FASHION_FILES.values() for name in names):
        return None
    from d2l import torch as d2l  # imported only here: it takes seconds to import

    previous = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="d2l-book-data-") as tmp:
        try:
            os.symlink(root.resolve(), pathlib.Path(tmp, "data"), target_is_directory=True)
        except OSError:  # e.g. Windows without the right to make links: use our own loader
            return None
        work = pathlib.Path(tmp, "work")
        work.mkdir()
        os.chdir(work)
        try:  # torchvision reads the whole set into memory here; the folder may then go
            with warnings.catch_warnings():
                # The book asks for 4 loader processes, which torch warns about on smaller
                # machines; `cut` below rebuilds the loaders with at most one per core.
                warnings.filterwarnings("ignore", message="This DataLoader will create")
                train_iter, test_iter = d2l.load_data_fashion_mnist(batch_size)
        finally:
            os.chdir(previous)

    def cut(loader: DataLoader, n: int, shuffle: bool) -> DataLoader:
        dataset = loader.dataset
        if n < len(dataset):
            keep = np.random.default_rng(1).permutation(len(dataset))[:n].tolist()
            dataset = Subset(dataset, keep)
        # The book starts 4 loader processes; more than there are cores only slows it down.
        return DataLoader(dataset, batch_size, shuffle=shuffle,
                          num_workers=min(loader.num_workers, os.cpu_count() or 1))

    return cut(train_iter, n_train, True), cut(test_iter, n_test, False)
