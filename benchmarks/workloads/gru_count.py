"""A GRU that counts: the held-out workload of `benchmarks.plan_quality` (generated from a seed).

Held out: no rule or constant of the planner was chosen by looking at this workload's results,
but one (the veto of the goodput's batch, named in benchmarks/harness.py).
It differs in kind from the workloads the planner was tuned on (an MLP, convolutional nets, a
transformer): a recurrent network, stepped through its sequence one position at a time.

Each sample is a sequence of LENGTH tokens drawn uniformly from VOCAB symbols; its label is how
many times symbol 0 occurs in it, CLASSES - 1 for that many or more. A model must carry the count
through the whole sequence. 200,000 training and 2,000 test
sequences; the model embeds each token, runs a one-layer GRU of width 64 and reads the label from
its last state (14,000 parameters, 30 ms a step at batch 64 on one core here).

Chosen once, before any plan for it was made: one worker at batch 64, lr 0.1, momentum 0.9 climbed
to 0.87 in 140 s, through drops to chance and back (2026-11-26); target 0.9.
"""

import torch
from torch import nn
from torch.utils.data import TensorDataset

VOCAB, LENGTH, CLASSES = 6, 128, 32
TRAIN, TEST = 200_000, 2_000
CACHE_DATASETS = True     # the same sequences for every seed


def _samples(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, VOCAB, (n, LENGTH), generator=g)
    return TensorDataset(x, (x == 0).sum(dim=1).clamp(max=CLASSES - 1))


def build_datasets(data_dir, seed):
    """The same sequences for every seed (the seed orders training, not the data)."""
    return _samples(TRAIN, 1), _samples(TEST, 2)


class Counter(nn.Module):
    def __init__(self, width: int = 64):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.gru = nn.GRU(16, width, batch_first=True)
        self.head = nn.Linear(width, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, last = self.gru(self.embed(x))
        return self.head(last[-1])


def build_model() -> nn.Module:
    return Counter()
