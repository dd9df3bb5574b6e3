"""The capstone's text, model and sizes; `capstone_job` runs notebook 09's saved step (capstone.py):
    python -m d2l_extras.distributed --nproc-per-node=2 -m d2l_extras.capstone --steps 20"""
import argparse
import math
from importlib import resources
from typing import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.checkpoint import checkpoint as _checkpoint

from .checks import COUNT, WHOLE, option, positive_number
from .distributed import distinct_processes, init_worker, run_worker
from .hardware import free_memory
from .memory import peak_memory
from .parallel import per_process_batch
from .profiles import PROFILES, profile
from .ring import bus_bandwidth
from .sizes import device_kind
from .lessons import Benchmark  # notebook 00 teaches it
from .timing import measure_interleaved


class CharText:
    """A text as character ids: its vocabulary, a 90/10 split and random batches."""

    def __init__(self, text: str) -> None:
        n_val, self.text, self.vocab = len(text) // 10, text, sorted(set(text))
        index = {ch: i for i, ch in enumerate(self.vocab)}
        ids = torch.tensor([index[ch] for ch in text], dtype=torch.long)
        # In order: the validation part is the end of the text, never seen in training.
        self.train, self.val = ids.split([len(text) - n_val, n_val])

    def __repr__(self) -> str:
        return (f"CharText({len(self.text)} characters, {len(self.vocab)} distinct, "
                f"train {len(self.train)}, val {len(self.val)})")

    def batch(self, batch_size: int, seq_len: int, generator: torch.Generator
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random training windows (X, Y) of shape (batch_size, seq_len); Y is X shifted by one."""
        if seq_len >= len(self.train):
            raise ValueError(f"seq_len {seq_len} needs more than the {len(self.train)} training "
                             f"characters; use seq_len < {len(self.train)}")
        starts = torch.randint(0, len(self.train) - seq_len, (batch_size,), generator=generator)
        windows = self.train[starts[:, None] + torch.arange(seq_len + 1)]
        return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


def load_text() -> CharText:
    """The Time Machine (shipped with d2l_extras) as a CharText."""
    path = resources.files("d2l_extras") / "texts" / "timemachine.txt"
    return CharText(path.read_text(encoding="utf-8"))


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which each position sees itself and earlier positions."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """softmax(q k^T / sqrt(d) + causal mask) v, written out (FlashAttention fuses it)."""
        T = q.shape[-2]
        # No buffer: DDP would broadcast it at every forward (a mask of ones costs a kernel).
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, T, 3D) -> three (B, heads, T, D / heads). qkv's outputs go head by head, as in
        # Megatron-LM: split by columns over k processes (notebook 07), each gets whole heads.
        qkv = self.qkv(x).unflatten(-1, (-1, 3, self.head_dim)).permute(3, 0, 2, 1, 4)
        return self.proj(self.attend(*qkv).transpose(1, 2).flatten(2))


class Block(nn.Module):
    """A pre-LayerNorm transformer block: x + attention(ln(x)), then x + MLP(ln(x))."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d_model), CausalSelfAttention(d_model, n_heads)
        self.ln2, self.mlp = nn.LayerNorm(d_model), nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """A decoder-only transformer on characters (nanoGPT's shape, no dropout, untied head)."""

    def __init__(self, vocab_size: int, seq_len: int, d_model: int, n_heads: int,
                 n_layers: int, checkpoint: int = 0) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be a multiple of n_heads ({n_heads})")
        self.checkpoint = checkpoint  # recompute every k-th block in backward (0: none)
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln_f, self.head = nn.LayerNorm(d_model), nn.Linear(d_model, vocab_size, bias=False)
        for module in self.modules():  # GPT-2's initialization: small normal weights, no biases
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, vocab) of the next character after each position of X (B, T)."""
        if X.dim() != 2 or X.shape[1] > len(self.pos_emb.weight) or X.is_floating_point():
            raise ValueError(f"TinyGPT needs integer ids of shape (batch, T <= "
                             f"{len(self.pos_emb.weight)}), got {tuple(X.shape)} of {X.dtype}")
        x = self.tok_emb(X) + self.pos_emb.weight[:X.shape[1]]
        for i, block in enumerate(self.blocks):  # a checkpointed block: recomputed in backward
            recompute = self.checkpoint and i % self.checkpoint == 0 and torch.is_grad_enabled()
            x = _checkpoint(block, x, use_reentrant=False) if recompute else block(x)
        return self.head(self.ln_f(x))

    @staticmethod
    def sizes(device: torch.device | str, *, budget: int | None = None) -> dict[str, int]:
        """The capstone's shape, batch and steps; on a GPU (or a budget) GROWTH x batch fits."""
        prof, kind = profile(), device_kind(device)
        keys = ("d_model", "n_heads", "n_layers", "seq_len", "batch", "steps")
        if kind == "cpu" and budget is None:
            return dict(zip(keys, SHAPES["cpu"][prof]))
        # With a budget (bytes) or on a GPU: the largest shape up to the profile's that fits.
        shapes, start = list(SHAPES[kind].values()), PROFILES.index(prof)
        free = free_memory(device) if budget is None else budget
        for d, h, L, T, wanted, _ in reversed(shapes[:start + 1]):
            state = training_bytes(d, h, L, T, 0)
            room = int(free * _FRACTION) - state
            per_sequence = training_bytes(d, h, L, T, 1) - state
            if room >= GROWTH * _MIN_BATCH * per_sequence:
                batch = min(wanted, room // (GROWTH * per_sequence))
                return dict(zip(keys, (d, h, L, T, batch, shapes[start][5])))
        raise ValueError(f"the smallest capstone model does not fit on {device}: close other "
                         "notebooks or use the CPU")


# (d_model, n_heads, n_layers, seq_len, batch, steps) per device kind and profile: the CPU's tiny,
# the GPU's `full` GPT-2 small's shape (nanoGPT) at seq 256.
SHAPES = {
    "cpu": {"ci": (64, 4, 2, 64, 16, 40), "class": (64, 4, 2, 64, 32, 60),
            "full": (256, 8, 4, 128, 32, 1000)},
    "gpu": {"ci": (128, 4, 2, 128, 32, 60), "class": (384, 6, 6, 256, 64, 500),
            "full": (768, 12, 12, 256, 32, 2000)},
}
_VOCAB = 128            # at least The Time Machine's 70 characters: an upper bound for memory
_MIN_BATCH = 4          # fewer sequences per step show nothing of a batch's effect
_FRACTION = 0.6         # of free memory; the rest is the allocator's slack and the CUDA context
GROWTH = 4              # the notebook's larger batch: GROWTH x batch must fit as well


def training_bytes(d_model: int, n_heads: int, n_layers: int, seq_len: int, batch: int) -> int:
    """Bytes one float32 Adam training step of TinyGPT holds, over-estimated for sizing."""
    params = 12 * n_layers * d_model ** 2 + (seq_len + 2 * _VOCAB) * d_model
    # Weights, gradients, Adam's two moments; per layer and sequence about 24 (T x d) float32
    # tensors and 3 (heads x T x T) ones, plus the logits, their log-softmax and gradient.
    layer = 4 * (24 * seq_len * d_model + 3 * n_heads * seq_len ** 2)
    return 16 * params + batch * ((n_layers + 1) * layer + 3 * 4 * seq_len * _VOCAB)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The DDP job's options: TinyGPT.sizes' keys, and what to time."""
    p = argparse.ArgumentParser(prog="python -m d2l_extras.capstone", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, kind, default, text in (
            ("d_model", WHOLE, 64, None), ("n_heads", WHOLE, 4, None),
            ("n_layers", WHOLE, 2, None), ("seq_len", WHOLE, 64, None),
            ("batch", WHOLE, 32, "global batch (sequences)"),
            ("steps", WHOLE, 20, "training steps, all timed"),
            ("lr", option(positive_number), 3e-3, None),
            ("comm_steps", COUNT, 5, "steps timed with and without allreduce (0: none)"),
            ("share", WHOLE, 1, "also time steps on 1/share of the batch (t_compute(B/k))"),
            ("threads", COUNT, 0, "torch threads per process (0: keep)"),
            ("timeout", option(positive_number), 120, "seconds any collective may wait")):
        p.add_argument(f"--{name}", type=kind, default=default, help=text)
    return p.parse_args(argv)


def _train(args: argparse.Namespace, trainer: Callable) -> dict:
    rank, k, device = init_worker(args.timeout)
    per_process_batch(args.batch, k)  # k equal slices, or an error that says so
    pids = distinct_processes()  # which processes took part: a check that k really ran
    model, step = trainer(args, rank, k, device)
    losses, times = [], []
    for i in range(args.steps):
        with Benchmark(devices=[device], verbose=False) as clock:
            loss = step(i)
        times.append(clock.elapsed)
        dist.all_reduce(loss)  # equal slices: the global loss is the mean of the slices'
        losses.append(loss.item() / k)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    out = {"processes": k, "pids": pids, "backend": dist.get_backend(),
           "device": device.type, "batch_size": args.batch, "losses": losses,
           "step_runs": times[1:] or times, "grad_bytes": grad_bytes}  # the first warms up

    def unsynced(*rows: slice) -> None:  # no allreduce (after training: replicas may drift)
        with model.no_sync():
            step(args.steps, *rows)
    if args.comm_steps:  # every process takes the same timed calls (a barrier before each)
        timed = measure_interleaved({"sync": lambda: step(args.steps), "no_sync": unsynced},
                                    devices=[device], runs=args.comm_steps, before=dist.barrier)
        out.update(synced_runs=timed["sync"].warm, no_sync_runs=timed["no_sync"].warm)
        if k > 1:  # the ring's bus bandwidth at the gradients' size
            flat = torch.zeros(grad_bytes // 4, device=device)
            t = measure_interleaved({"ar": lambda: dist.all_reduce(flat)}, devices=[device],
                                    runs=args.comm_steps, before=dist.barrier)["ar"].median
            out.update(allreduce_s=t, busbw=bus_bandwidth(grad_bytes, t, k)[1])
    # every process takes it (its allreduce needs all); the peak is above the model and Adam's
    out["peak_bytes"] = peak_memory(lambda: step(args.steps), device)
    if args.share > 1:  # a whole step on B/share, nothing sent: t_compute(B/k) for k=share
        rows = slice(0, max(1, args.batch // args.share))
        out["share_runs"] = measure_interleaved({"share": lambda: unsynced(rows)},
                                                devices=[device], runs=max(4, args.comm_steps)
                                                )["share"].warm
    return out


def capstone_job(trainer: Callable, argv: list[str] | None = None) -> None:
    """The DDP job in this process: model, step = trainer(args, rank, k, device); train, time."""
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    run_worker(lambda: _train(args, trainer))
