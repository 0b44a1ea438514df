"""A small character-level language model of Python source: the standard library's own .py files
(every Python installation carries them; nothing is downloaded, and `data_dir` is ignored).

Text: this interpreter's `sysconfig.get_paths()["stdlib"]`, without site-packages, test folders,
idlelib, lib2to3, turtledemo, the codec tables (encodings/), pydoc_data and ensurepip; files of
fewer than 129 characters or with more than 1% characters outside the vocabulary are skipped.
A file is a validation file when the CRC-32 of its relative path is 0 modulo 10. Python 3.11.7
here: 439 files, 7.9 M training and 0.92 M validation characters. Vocabulary: 98 ids (tab,
newline, the 95 printable ASCII characters, one id for everything else). Training set: 32,768
windows of 129 characters at evenly spaced offsets over all the training text (4.2 M characters;
67 MB as int64 x and y; a 3-minute run at the best setting reads about 80% of it once); test set:
128 windows of the validation files. Built in about 1 s; `evaluate` on the test set takes about
0.26 s. The same data for every seed; the cache key names the Python version (CACHE_DATASETS).

Model: decoder-only transformer, 4 pre-norm layers of width 128 (4 heads), context 128, learned
position embeddings, causal attention (F.scaled_dot_product_attention); 834,914 parameters.
Loss: cross-entropy in nats per character over every position; metric: next-character accuracy.
On this machine's two cores (torch.set_num_threads(2)) a step costs about 57, 115, 220, 425 and
870 ms at batch 8, 16, 32, 64 and 128: 18-19 k characters/s whatever the batch, so small batches
(more updates per second) learn fastest.

Target 1.70 nats per character (2.45 bits): with RECIPE (AdamW, beta2 0.95, weight decay 0.1,
warm-up over 5% then cosine to 0.1 x lr, gradient norm clipped at 1), a well-tuned setting (one
process, batch 16, lr 6e-3) reaches it in about a minute and a half of training on two cores and
is still falling there, while the default a new user would type (batch 32, lr 3e-4) does not
reach it in 240 s (docs/decisions.md, charlm_stdlib.TARGET_LOSS).
"""

import math
import sys
import sysconfig
import zlib
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

CONTEXT, WIDTH, LAYERS, HEADS = 128, 128, 4, 4
TRAIN_WINDOWS, TEST_WINDOWS = 32_768, 128
# Vocabulary: tab, newline and the 95 printable ASCII characters; everything else one id.
CHARS = "\t\n" + "".join(chr(c) for c in range(32, 127))
UNKNOWN = len(CHARS)
VOCAB = len(CHARS) + 1                                  # 98
# Folders (anywhere in a path) that are not ordinary library source: tests, IDLE, the 2to3
# fixers, the demo turtles, codec tables, pydoc's topic dump, the packaged wheels' bootstrap.
SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "idlelib", "lib2to3",
             "turtledemo", "encodings", "pydoc_data", "ensurepip", "__phello__", "__pycache__"}
MAX_UNKNOWN = 0.01      # files with more than 1% characters outside the vocabulary are skipped
TARGET_LOSS = 1.70      # nats per character (2.45 bits): see the docstring
# How to train it (read by omnitune's runtime): AdamW, linear warm-up over the first 5% of the run's
# predicted iterations, cosine decay to 0.1 x lr, gradient norm clipped at 1. Weight decay 0.1 is
# GPT's usual value; in a run of minutes that reads each window at most once it neither helps nor
# hurts (charlm_stdlib.TARGET_LOSS in docs/decisions.md). The 5% warm-up, 0.1 floor and beta2 0.95
# (RECIPE names no betas) are what the target's calibration used; not tuned further.
RECIPE = {"optimizer": "adamw", "weight_decay": 0.1, "beta2": 0.95, "schedule": "cosine", "warmup": 0.05,
          "floor": 0.1, "precision": "fp32", "clip_grad_norm": 1.0}
CACHE_DATASETS = f"python {sys.version} | stdlib {sysconfig.get_paths()['stdlib']}"

_TABLE = np.full(129, UNKNOWN, dtype=np.int64)          # code point (capped at 128) -> id
_TABLE[[ord(c) for c in CHARS]] = np.arange(len(CHARS))


def _sources() -> list[tuple[str, Path]]:
    """(relative path, path) of the standard library's .py files, sorted; no tests, no site-packages."""
    root = Path(sysconfig.get_paths()["stdlib"])
    found = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if rel.parts[0].startswith("config-") or SKIP_DIRS.intersection(rel.parts[:-1]):
            continue
        if rel.name.startswith("test_") or not path.is_file():
            continue
        found.append((rel.as_posix(), path))
    return sorted(found)


def encode(text: str) -> np.ndarray:
    """Character ids (int64) of `text`."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    return _TABLE[np.minimum(codes, 128)]


def decode(ids) -> str:
    return "".join(CHARS[i] if i < UNKNOWN else "\ufffd" for i in ids)


def _corpus(validation: bool) -> np.ndarray:
    """The ids of the training (or validation) files, concatenated; a file is a validation file
    when the CRC-32 of its relative path is 0 modulo 10."""
    parts = []
    for rel, path in _sources():
        if (zlib.crc32(rel.encode()) % 10 == 0) != validation:
            continue
        ids = encode(path.read_text(encoding="utf-8", errors="replace"))
        if len(ids) > CONTEXT and (ids == UNKNOWN).mean() <= MAX_UNKNOWN:
            parts.append(ids)
            parts.append(encode("\n\n"))
    return np.concatenate(parts)


def _windows(ids: np.ndarray, n: int | None, context: int = CONTEXT) -> TensorDataset:
    """`n` windows of `context`+1 characters at evenly spaced offsets over the whole of `ids` (so
    every part of the library is represented; None: as many as fit without overlapping);
    x = window[:-1], y = window[1:], both int64 (n, context). Windows share at most one
    character (one's last target may be the next one's first input)."""
    span = context + 1
    n = (len(ids) - 1) // context if n is None else n
    if n > (len(ids) - 1) // context:
        raise RuntimeError(f"charlm_stdlib: only {len(ids):,} characters of standard-library source; "
                           f"{n * context + 1:,} are needed")
    starts = np.linspace(0, len(ids) - span, n).astype(np.int64)
    windows = torch.from_numpy(ids[starts[:, None] + np.arange(span)])
    return TensorDataset(windows[:, :-1].clone(), windows[:, 1:].clone())


def build_datasets(data_dir, seed):
    """The same windows for every seed (the seed orders training, not the data); `data_dir` is
    ignored: the text is this interpreter's own standard library."""
    return _windows(_corpus(False), TRAIN_WINDOWS), _windows(_corpus(True), TEST_WINDOWS)


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then a 4x GELU MLP."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.norm2(x))


class CharTransformer(nn.Module):
    """Decoder-only transformer over characters: token and learned position embeddings, `layers`
    pre-norm blocks, a final LayerNorm and a linear head; (B, T) int64 -> logits (B, T, vocab)."""

    def __init__(self, vocab: int = VOCAB, context: int = CONTEXT, width: int = WIDTH,
                 layers: int = LAYERS, heads: int = HEADS):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, vocab)
        for name, p in self.named_parameters():      # GPT-2's initialization
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "mlp.2.weight")) else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h))


def build_model() -> nn.Module:
    return CharTransformer()


def loss_fn(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats per character) over every position of every window."""
    return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]).float(), targets.reshape(-1))


def metric(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per window, the fraction of next characters predicted right; summed over the windows."""
    return (outputs.argmax(dim=-1) == targets).float().mean(dim=1).sum()
