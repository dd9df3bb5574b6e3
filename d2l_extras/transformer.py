"""The capstone's character-level transformer (notebook 09, capstone.py): text, model, sizes."""
import math
from importlib import resources

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint as _checkpoint

from .checks import whole_number
from .hardware import free_memory
from .profiles import PROFILES, profile
from .sizes import device_kind


class CharText:
    """A text as character ids: vocabulary, encode/decode, a 90/10 split and random batches."""

    def __init__(self, text: str) -> None:
        n_val = len(text) // 10
        if n_val < 2:
            raise ValueError(f"a text of {len(text)} characters is too short: use 20 or more")
        self.text, self.vocab = text, sorted(set(text))
        self._index = {ch: i for i, ch in enumerate(self.vocab)}
        # In order: the validation part is the end of the text, never seen in training.
        self.train, self.val = self.encode(text).split([len(text) - n_val, n_val])

    def __repr__(self) -> str:
        return (f"CharText({len(self.text)} characters, {len(self.vocab)} distinct, "
                f"train {len(self.train)}, val {len(self.val)})")

    def encode(self, s: str) -> torch.Tensor:
        """The ids of the characters of s (a LongTensor); unknown characters are a ValueError."""
        if unknown := sorted(set(s) - self._index.keys()):
            raise ValueError(f"characters not in the vocabulary: {''.join(unknown)!r}")
        return torch.tensor([self._index[ch] for ch in s], dtype=torch.long)

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        """The string of a sequence of ids (a 1-d tensor or a list of ints)."""
        ids = torch.as_tensor(ids).tolist()  # a 1-d sequence of ints gives a list of ints
        if not (isinstance(ids, list) and all(type(i) is int and 0 <= i < len(self.vocab)
                                              for i in ids)):
            raise ValueError("decode() needs a 1-d sequence of integer ids in the vocabulary "
                             f"(0..{len(self.vocab) - 1}), got {str(ids)[:60]}")
        return "".join(self.vocab[i] for i in ids)

    def batch(self, batch_size: int, seq_len: int, generator: torch.Generator
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random training windows (X, Y) of shape (batch_size, seq_len); Y is X shifted by one."""
        batch_size = whole_number(batch_size, "batch_size")
        seq_len = whole_number(seq_len, "seq_len")
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"batch() needs a torch.Generator, got {type(generator).__name__}")
        if seq_len >= len(self.train):
            raise ValueError(f"seq_len {seq_len} needs more than the {len(self.train)} training "
                             f"characters; use seq_len < {len(self.train)}")
        starts = torch.randint(0, len(self.train) - seq_len, (batch_size,), generator=generator,
                               device=generator.device)
        windows = self.train[starts.cpu()[:, None] + torch.arange(seq_len + 1)]
        return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


def load_text(name: str = "timemachine", max_chars: int | None = None) -> CharText:
    """A text shipped with d2l_extras (The Time Machine by default), as a CharText."""
    folder = resources.files("d2l_extras") / "texts"
    names = sorted(f.name[:-4] for f in folder.iterdir() if f.name.endswith(".txt"))
    if name not in names:
        raise ValueError(f"no text {name!r}; available: {', '.join(names)}")
    text = (folder / f"{name}.txt").read_text(encoding="utf-8")
    return CharText(text if max_chars is None else text[:whole_number(max_chars, "max_chars")])


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which each position sees itself and earlier positions."""

    def __init__(self, d_model: int, n_heads: int, seq_len: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.register_buffer("mask", torch.ones(seq_len, seq_len, dtype=torch.bool).tril(),
                             persistent=False)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """softmax(q k^T / sqrt(d) + causal mask) v, written out (FlashAttention fuses it)."""
        T = q.shape[-2]
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return scores.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1) @ v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        # (B, T, 3D) -> three (B, heads, T, D / heads)
        qkv = self.qkv(x).view(B, T, 3, self.n_heads, D // self.n_heads).permute(2, 0, 3, 1, 4)
        return self.proj(self.attend(*qkv).transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    """A pre-LayerNorm transformer block: x + attention(ln(x)), then x + MLP(ln(x))."""

    def __init__(self, d_model: int, n_heads: int, seq_len: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, seq_len)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """A decoder-only transformer on characters (nanoGPT's shape, no dropout, untied head)."""

    def __init__(self, vocab_size: int, seq_len: int, d_model: int, n_heads: int,
                 n_layers: int, checkpoint: int = 0) -> None:
        super().__init__()
        for value, what in ((vocab_size, "vocab_size"), (seq_len, "seq_len"),
                            (d_model, "d_model"), (n_heads, "n_heads"), (n_layers, "n_layers")):
            whole_number(value, what)
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be a multiple of n_heads ({n_heads})")
        self.checkpoint, self.seq_len = whole_number(checkpoint, "checkpoint", minimum=0), seq_len
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, seq_len) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        for module in self.modules():  # GPT-2's initialization: small normal weights, no biases
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    @staticmethod
    def sizes(device: torch.device | str, **kwargs) -> dict[str, int]:
        """The capstone's shape, batch and steps for this device (capstone_sizes)."""
        return capstone_sizes(device, **kwargs)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, vocab) of the next character after each position of X (B, T)."""
        if X.dim() != 2 or X.shape[1] > self.seq_len or X.is_floating_point():
            raise ValueError(f"TinyGPT needs integer ids of shape (batch, T <= {self.seq_len}), "
                             f"got {tuple(X.shape)} of {X.dtype}")
        x = self.tok_emb(X) + self.pos_emb(torch.arange(X.shape[1], device=X.device))
        for i, block in enumerate(self.blocks):
            if self.checkpoint and i % self.checkpoint == 0 and torch.is_grad_enabled():
                x = _checkpoint(block, x, use_reentrant=False)  # recomputed in backward
            else:
                x = block(x)
        return self.head(self.ln_f(x))


def lm_loss(model: nn.Module, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the model's next-character predictions for X against Y."""
    logits = model(X)
    if Y.shape != logits.shape[:2]:
        raise ValueError(f"Y must have X's shape {tuple(logits.shape[:2])}, got {tuple(Y.shape)}")
    return F.cross_entropy(logits.flatten(0, 1).float(), Y.flatten())


# (d_model, n_heads, n_layers, seq_len, batch, steps) per device kind and profile: the CPU's tiny,
# the GPU's `full` GPT-2 small's shape (nanoGPT) at seq 256.
_SHAPES = {
    "cpu": {"ci": (64, 4, 2, 64, 16, 40), "class": (64, 4, 2, 64, 32, 60),
            "full": (256, 8, 4, 128, 32, 1000)},
    "gpu": {"ci": (128, 4, 2, 128, 32, 60), "class": (384, 6, 6, 256, 64, 500),
            "full": (768, 12, 12, 256, 32, 2000)},
}
_VOCAB = 128            # at least The Time Machine's 70 characters: an upper bound for memory
_MIN_BATCH = 4          # fewer sequences per step show nothing of a batch's effect
_FRACTION = 0.6         # of free memory; the rest is the allocator's slack and the CUDA context
GROWTH = 4              # the notebook's larger batch: GROWTH x batch must fit as well


def training_bytes(d_model: int, n_heads: int, n_layers: int, seq_len: int,
                   batch: int) -> int:
    """Bytes one float32 Adam training step of TinyGPT holds, over-estimated for sizing."""
    params = 12 * n_layers * d_model ** 2 + (seq_len + 2 * _VOCAB) * d_model
    # Weights, gradients, Adam's two moments; per layer and sequence about 24 (T x d) float32
    # tensors and 3 (heads x T x T) ones, plus the logits, their log-softmax and gradient.
    layer = 4 * (24 * seq_len * d_model + 3 * n_heads * seq_len ** 2)
    return 16 * params + batch * ((n_layers + 1) * layer + 3 * 4 * seq_len * _VOCAB)


def capstone_sizes(device: torch.device | str, *, budget: int | None = None,
                   profile_name: str | None = None) -> dict[str, int]:
    """The capstone's shape, batch and steps; on a GPU (or a budget) GROWTH x batch must fit."""
    prof = profile() if profile_name is None else profile_name
    if prof not in PROFILES:
        raise ValueError(f"unknown profile {prof!r}; use one of {', '.join(PROFILES)}")
    kind = device_kind(device)
    keys = ("d_model", "n_heads", "n_layers", "seq_len", "batch", "steps")
    if kind == "cpu" and budget is None:
        return dict(zip(keys, _SHAPES["cpu"][prof]))
    # With a budget (bytes) or on a GPU: the largest shape up to the profile's that fits.
    shapes, start = list(_SHAPES[kind].values()), PROFILES.index(prof)
    free = free_memory(device) if budget is None else budget
    for d, h, L, T, wanted, _ in reversed(shapes[:start + 1]):
        state = training_bytes(d, h, L, T, 0)
        per_sequence = training_bytes(d, h, L, T, 1) - state
        room = int(free * _FRACTION) - state
        if room >= GROWTH * _MIN_BATCH * per_sequence:
            batch = min(wanted, room // (GROWTH * per_sequence))
            return dict(zip(keys, (d, h, L, T, batch, shapes[start][5])))
    raise ValueError(f"the smallest capstone model does not fit on {device}: close other "
                     "notebooks or use the CPU")
