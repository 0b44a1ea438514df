"""Workloads: a Python file that builds a model and its datasets.

The contract (see README): `build_model()` returns a `torch.nn.Module`;
`build_datasets(data_dir, seed)` returns `(train, test)` torch datasets. Optional:
`loss_fn(outputs, targets)` (default cross-entropy) and `metric(outputs, targets)` returning the
number of correct predictions in the batch (default: classification accuracy), and
`RECIPE`: the training recipe, a dict of core/recipe.py's fields (default: SGD at a constant
rate), and `CACHE_DATASETS`: True (or a string naming what else the data depends on, such as a package's
version) when `build_datasets(None, seed)` returns the same tensor datasets for every seed. Those
are built once and kept in omnitune's cache (env.cache_dir), keyed by the file's contents, the
string, and torch's and numpy's versions: generated sets can take seconds to build, and every
`profile`, `plan` and worker of a `run` would build them again.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

import torch
from torch.utils.data import Dataset, Subset, TensorDataset

from omnitune.core import env
from omnitune.core.errors import UserError
from omnitune.core.files import atomic_write_bytes
from omnitune.core.recipe import Recipe, parse as parse_recipe

WORKLOADS_DIR = Path(__file__).resolve().parents[1] / "workloads"     # the bundled ones, installed too


def resolve(spec: str) -> Path:
    """A path (ending in .py or holding a "/") → that file; `NAME` (dashes or underscores alike) →
    `models/NAME.py` in the current directory (the user's own), else the bundled
    `omnitune/workloads/NAME.py`."""
    if spec.endswith(".py") or "/" in spec:
        path = Path(spec)
        if not path.is_file():
            raise UserError(f"--workload: file {spec} not found")
        return path.resolve()
    name = spec.replace("-", "_")
    for folder in (Path.cwd() / "models", WORKLOADS_DIR):
        if name != "__init__" and (folder / f"{name}.py").is_file():
            return (folder / f"{name}.py").resolve()
    known = sorted(p.stem.replace("_", "-") for p in WORKLOADS_DIR.glob("*.py") if p.stem != "__init__")
    raise UserError(f"--workload: unknown workload {spec!r} (known: {', '.join(known)})")


def _count_correct(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return (outputs.argmax(dim=1) == targets).sum()


@dataclass(frozen=True)
class Workload:
    """A loaded workload file. `spec` is what the user typed; `path` the file it names."""

    spec: str
    path: Path
    module: ModuleType
    digest: str = ""        # sha256 of the file as it was imported: keys its cached datasets
    recipe: Recipe = Recipe()

    @property
    def name(self) -> str:
        return self.path.stem.replace("_", "-")

    def build_model(self) -> torch.nn.Module:
        return self.module.build_model()

    def build_datasets(self, data_dir: str | None, seed: int) -> tuple[Dataset, Dataset]:
        """(train, test); from the cache where the workload allows it (CACHE_DATASETS) and no
        data directory is given."""
        path = self.cache_path() if data_dir is None else None
        if path is not None and path.is_file():
            try:
                return shared(str(path))
            except Exception:       # not a file this version wrote whole: build the sets again
                pass
        datasets = self.module.build_datasets(data_dir, seed)
        if path is not None:
            try:
                share(datasets, path)
                for stale in path.parent.glob(f"{self.path.stem}-*.pt"):    # an older version's
                    if stale != path:
                        stale.unlink(missing_ok=True)
            except OSError:         # a cache that cannot be written only costs the next build
                pass
        return datasets

    def cache_path(self) -> Path | None:
        """The cache file of this workload's generated datasets; None where they are not cached."""
        extra = getattr(self.module, "CACHE_DATASETS", False)
        root = env.cache_dir()
        if not extra or root is None:
            return None
        import numpy as np

        key = hashlib.sha256(f"{self.digest}|{extra}|torch {torch.__version__}|numpy {np.__version__}".encode())
        return root / "datasets" / f"{self.path.stem}-{key.hexdigest()[:16]}.pt"

    @property
    def loss_fn(self) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        return getattr(self.module, "loss_fn", torch.nn.functional.cross_entropy)

    @property
    def metric(self) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        return getattr(self.module, "metric", _count_correct)



def load(spec: str) -> Workload:
    path = resolve(spec)
    mod_name = f"omnitune_workload_{path.stem}"
    module_spec = importlib.util.spec_from_file_location(mod_name, path)
    if module_spec is None or module_spec.loader is None:
        raise UserError(f"--workload: cannot import {path}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[mod_name] = module
    try:
        module_spec.loader.exec_module(module)
    except UserError:
        raise
    except Exception as e:
        raise UserError(f"{path}: failed to import ({e.__class__.__name__}: {e})") from None
    for fn in ("build_model", "build_datasets"):
        if not callable(getattr(module, fn, None)):
            raise UserError(f"{path}: a workload must define {fn}() (see README, 'Workloads')")
    recipe = parse_recipe(getattr(module, "RECIPE", None), str(path))
    return Workload(spec=spec, path=path, module=module, digest=digest, recipe=recipe)


def share(datasets: tuple[Dataset, Dataset], path: Path) -> str | None:
    """Write tensor datasets to `path` so that other processes of this host load them instead of
    building them again (seconds each for generated ones); None when they are not tensors."""
    if not all(isinstance(d, TensorDataset) for d in datasets):
        return None
    data = io.BytesIO()
    torch.save([d.tensors for d in datasets], data)
    atomic_write_bytes(path, data.getbuffer())      # processes reading it never see half a file
    return str(path)


def shared(path: str) -> tuple[Dataset, Dataset]:
    """The datasets `share` wrote."""
    train, test = torch.load(path, weights_only=True)
    return TensorDataset(*train), TensorDataset(*test)


def first(dataset: Dataset, n: int) -> Dataset:
    """The first `n` samples of a dataset (a TensorDataset stays one, so evaluation slices it)."""
    if len(dataset) <= n:
        return dataset
    if isinstance(dataset, TensorDataset):
        return TensorDataset(*(t[:n] for t in dataset.tensors))
    return Subset(dataset, range(n))


def on_device(dataset: Dataset, device: torch.device) -> Dataset:
    """The training set where a GPU worker computes: a TensorDataset's tensors copied to the GPU
    once, so that each batch is gathered there rather than gathered on the host and copied (for
    a small model that copy adds noticeably to the step); the same indices give the same
    batches. Other datasets, and CPU devices, as they are."""
    if device.type != "cuda" or not isinstance(dataset, TensorDataset):
        return dataset
    return TensorDataset(*(t.to(device) for t in dataset.tensors))


def autocast(workload: Workload, device: torch.device):
    """Where a step's forward pass runs: under bf16 autocast on a CUDA device when the recipe asks
    for bf16, else as it is (CPUs stay fp32)."""
    if workload.recipe.precision == "bf16" and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def collate(dataset: Dataset, indices) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather samples by index; a TensorDataset is indexed directly, others one by one."""
    if isinstance(dataset, TensorDataset):
        x, y = dataset.tensors[:2]
        idx = torch.as_tensor(indices, dtype=torch.long, device=x.device)    # `batches`' slices: there already
        return x[idx], y[idx]
    xs, ys = zip(*(dataset[int(i)] for i in indices))
    return torch.stack([torch.as_tensor(x) for x in xs]), torch.as_tensor(ys)


LABEL_SAMPLES = 4096     # labels that label_loss reads of a set that is not tensors (its noise: about 0.01 nats)
IGNORED = -100           # cross-entropy's ignore_index: such labels count in no loss


def label_loss(workload: Workload, train: Dataset, samples: int = LABEL_SAMPLES, seed: int = 0) -> float | None:
    """The loss of a model that ignores its inputs and predicts the training labels' frequencies:
    their entropy in nats, from every label of a TensorDataset, else from `samples` drawn at random
    (`seed`). A model that has learned the frequencies and little else sits at this loss; where
    the classes are balanced it is the untrained model's, log(classes). None where the workload's
    loss is not the default cross-entropy, or its labels are not class indices (labels of
    IGNORED, which cross-entropy skips, are skipped)."""
    import numpy as np

    if workload.loss_fn is not torch.nn.functional.cross_entropy or len(train) == 0:
        return None
    if isinstance(train, TensorDataset):
        y = train.tensors[1]
    else:
        idx = np.random.default_rng(seed).permutation(len(train))[:samples]
        try:
            y = torch.as_tensor([torch.as_tensor(train[int(i)][1]).tolist() for i in idx])
        except (TypeError, ValueError):         # labels of other kinds, or of uneven lengths
            return None
    if y.dim() != 1 or y.dtype.is_floating_point or y.dtype == torch.bool:
        return None
    y = y[y != IGNORED]
    if len(y) == 0 or int(y.min()) < 0:
        return None
    counts = torch.unique(y.cpu(), return_counts=True)[1]
    p = counts.double() / len(y)
    return abs(float(-(p * p.log()).sum()))        # one class: 0, not -0


def evaluate(workload: Workload, model: torch.nn.Module, test: Dataset,
             device: torch.device, batch_size: int = 512) -> tuple[float, float]:
    """Mean loss and metric (fraction correct) of `model` on `test`."""
    model.eval()
    total_loss, correct, n = 0.0, 0.0, len(test)
    with torch.no_grad():
        for start in range(0, n, batch_size):
            x, y = collate(test, range(start, min(start + batch_size, n)))
            x, y = x.to(device), y.to(device)
            out = model(x)
            total_loss += float(workload.loss_fn(out, y)) * len(y)
            correct += float(workload.metric(out, y))
    model.train()
    return total_loss / n, correct / n


def batches(dataset: Dataset, batch_size: int, seed: int, shard: int = 0, n_shards: int = 1):
    """An endless stream of (x, y) batches from one shard of `dataset`, reshuffled each epoch.

    A TensorDataset's epoch order goes where its tensors are once per epoch, and each batch's
    indices are a slice of it: on a GPU a batch then costs no copy from the host, which would
    wait for the steps queued before it (a small model's step is mostly such waits)."""
    import numpy as np

    mine = np.random.default_rng(seed).permutation(len(dataset))[shard::n_shards]
    rng = np.random.default_rng([seed, shard])
    where = dataset.tensors[0].device if isinstance(dataset, TensorDataset) else None
    order, pos = None, 0
    while True:
        parts, need = [], batch_size
        while need:
            if order is None or pos == len(order):
                order, pos = rng.permutation(mine), 0
                if where is not None:
                    order = torch.from_numpy(order).to(where)
            take = min(need, len(order) - pos)
            parts.append(order[pos:pos + take])
            pos, need = pos + take, need - take
        idx = parts[0] if len(parts) == 1 else (torch.cat(parts) if where is not None else np.concatenate(parts))
        yield collate(dataset, idx)
