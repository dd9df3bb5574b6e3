"""Training data: Fashion-MNIST, cached (never in the repository) or downloaded, else the digits."""
import contextlib
import functools
import importlib.util
import os
import pathlib
import socket
import threading
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from .profiles import by_profile
from .report import notice as _notice

DATA_ENV = "D2L_DATA_DIR"
SOURCES = ("auto", "fashion-mnist", "digits")
FASHION_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte")  # unpacked, as torchvision keeps them
FASHION_HOST = "fashion-mnist.s3-website.eu-central-1.amazonaws.com"


def default_sizes() -> tuple[int, int]:
    """Return (train, test) subset sizes of the active profile."""
    return by_profile((1024, 300), (12000, 2000), (60000, 10000))


def _read_fashion(root: pathlib.Path, download: bool = False
                  ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    from torchvision.datasets import FashionMNIST  # imported only here: it takes seconds
    sets = {split: FashionMNIST(str(root), train=split == "train", download=download)
            for split in ("train", "test")}
    return {split: (d.data.numpy(), d.targets.numpy()) for split, d in sets.items()}


@functools.lru_cache  # offline, the network is asked once per process
def _download_fashion(root: pathlib.Path, timeout: float) -> str:
    # Download Fashion-MNIST with torchvision; "" on success, else why not, in a few words.
    reached = []

    def probe() -> None:  # in a thread: name resolution ignores socket timeouts
        with contextlib.suppress(OSError):  # the name does not resolve, no route, port closed
            socket.create_connection((FASHION_HOST, 80), timeout=timeout).close()
            reached.append(True)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    if not reached:
        return f"no answer within {timeout:.0f} s" if thread.is_alive() else "no network"
    previous = socket.getdefaulttimeout()
    try:
        socket.setdefaulttimeout(max(timeout, 30))  # a stalled transfer must not hang the notebook
        _read_fashion(root, download=True)
    except Exception:  # any failure means: use the fallback, and say so in a few words
        return "the download failed"
    finally:
        socket.setdefaulttimeout(previous)
    return ""


def _read_digits() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    # Reading sklearn's CSV directly avoids importing scikit-learn (seconds) in every worker.
    spec = importlib.util.find_spec("sklearn")
    csv = spec and pathlib.Path(spec.origin).with_name("datasets") / "data" / "digits.csv.gz"
    if csv and csv.exists():
        table = np.loadtxt(csv, delimiter=",")
        pixels, labels = table[:, :-1], table[:, -1]
    else:  # a layout we do not know: ask sklearn
        from sklearn.datasets import load_digits
        pixels, labels = load_digits(return_X_y=True)
    # 8x8 pixels with values 0..16 -> 28x28 in [0, 255], the shape and range Fashion-MNIST has.
    small = torch.tensor(pixels.reshape(-1, 1, 8, 8), dtype=torch.float32) / 16
    big = F.interpolate(small, size=(28, 28), mode="bilinear")
    X = (big.squeeze(1).clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    y = labels.astype(np.uint8)
    order = np.random.default_rng(0).permutation(len(X))  # once, fixed: 1,497 train, 300 test
    return {"train": (X[order[300:]], y[order[300:]]), "test": (X[order[:300]], y[order[:300]])}


@dataclass
class ImageData:
    """Images (N, 1, 28, 28) in [0, 1] with int64 labels, and which dataset they came from."""
    name: str
    train: TensorDataset
    test: TensorDataset
    fallback: str = ""  # why Fashion-MNIST was not used, when it was asked for ("" otherwise)

    def loaders(self, batch_size: int, seed: int = 0) -> tuple[DataLoader, DataLoader]:
        """Return (train, test) DataLoaders; the training order is reproducible from seed."""
        return (DataLoader(self.train, batch_size, shuffle=True,
                           generator=torch.Generator().manual_seed(seed)),
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
    default_train, default_test = default_sizes()
    n_train, n_test = n_train or default_train, n_test or default_test
    root = pathlib.Path(root or os.environ.get(DATA_ENV, "").strip() or "~/.cache/d2l-extras")
    root = root.expanduser()
    folder = root / "FashionMNIST" / "raw"  # where torchvision keeps it
    arrays, why = None, ""
    if source != "digits":
        if not all((folder / name).exists() for name in FASHION_FILES):
            why = _download_fashion(root, timeout) if download else "downloads are switched off"
        arrays = None if why else _read_fashion(root)
        if arrays is None and source == "fashion-mnist":
            raise FileNotFoundError(f"Fashion-MNIST is not in {folder} ({why}). Download it there "
                                    f"(or set {DATA_ENV}), or use source='auto' for the digits.")
    name, head, fallback = "fashion-mnist", f"Data: Fashion-MNIST from {folder}", ""
    if arrays is None:
        arrays, name = _read_digits(), "digits"
        head = "Data: scikit-learn's handwritten digits (8x8, resized to 28x28)"
        if why:  # a fixed sentence, so that notice() says it once per process
            what = "could not be downloaded" if download else "is not cached"
            fallback = f"Fashion-MNIST {what} ({why}): using scikit-learn's digits"
    train, test = _subset(*arrays["train"], n_train), _subset(*arrays["test"], n_test)
    if verbose:
        if fallback:
            _notice(fallback)  # "notice: ...", the first time in this process only
        print(f"{head}; {len(train)} training and {len(test)} test images.")
    return ImageData(name, train, test, fallback)
