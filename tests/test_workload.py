import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

from omnitune.core.errors import UserError
from omnitune.runtime import workload


def test_names_with_dashes_or_underscores():
    assert workload.resolve("lenet-digits") == workload.resolve("lenet_digits")
    assert workload.resolve("lenet-digits").name == "lenet_digits.py"


def test_unknown_workload_lists_known():
    with pytest.raises(UserError, match="unknown workload 'nope'.*lenet-digits"):
        workload.resolve("nope")


def test_bundled_workloads_live_in_the_package():
    assert workload.resolve("lenet-digits") == workload.WORKLOADS_DIR / "lenet_digits.py"
    assert workload.WORKLOADS_DIR.parent.name == "omnitune"
    with pytest.raises(UserError, match="unknown workload '__init__'"):
        workload.resolve("__init__")


def test_own_models_folder_comes_first(tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "lenet_digits.py").write_text("")
    (tmp_path / "models" / "mine.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert workload.resolve("lenet-digits") == (tmp_path / "models" / "lenet_digits.py").resolve()
    assert workload.resolve("mine") == (tmp_path / "models" / "mine.py").resolve()
    assert workload.resolve("teacher-mlp") == workload.WORKLOADS_DIR / "teacher_mlp.py"


def test_user_file(tmp_path):
    f = tmp_path / "mine.py"
    f.write_text("import torch\nfrom torch.utils.data import TensorDataset\n"
                 "def build_model():\n    return torch.nn.Linear(3, 2)\n"
                 "def build_datasets(data_dir, seed):\n"
                 "    x = torch.randn(20, 3); y = (x[:, 0] > 0).long()\n"
                 "    return TensorDataset(x, y), TensorDataset(x, y)\n")
    wl = workload.load(str(f))
    train, test = wl.build_datasets(None, 0)
    model = wl.build_model()
    loss, acc = workload.evaluate(wl, model, test, torch.device("cpu"))
    assert loss > 0 and 0 <= acc <= 1


def test_contract_is_checked(tmp_path):
    f = tmp_path / "bad.py"
    f.write_text("def build_model():\n    pass\n")
    with pytest.raises(UserError, match="must define build_datasets"):
        workload.load(str(f))
    f.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(UserError, match="failed to import.*boom"):
        workload.load(str(f))


@pytest.mark.parametrize("recipe, says", [
    ("{'optimizer': 'adam'}", r"RECIPE\['optimizer'\] must be 'sgd' or 'adamw', got 'adam'"),
    ("{'warmup': 1.5}", r"RECIPE\['warmup'\] must be in \[0, 1\), got 1.5"),
    ("{'weight_decay': '0.1'}", r"RECIPE\['weight_decay'\] must be a number >= 0"),
    ("{'lr': 0.1}", r"RECIPE\['lr'\] is not a recipe field"),
    ("['adamw']", "RECIPE must be a dict"),
])
def test_a_bad_recipe_names_the_file_and_the_field(tmp_path, recipe, says):
    f = tmp_path / "mine.py"
    f.write_text(f"RECIPE = {recipe}\ndef build_model(): pass\ndef build_datasets(d, s): pass\n")
    with pytest.raises(UserError, match=f"^{tmp_path / 'mine.py'}: {says}"):
        workload.load(str(f))


def test_a_recipe_is_read():
    wl = workload.load("charlm-stdlib")
    assert wl.recipe.optimizer == "adamw" and wl.recipe.schedule == "cosine"
    assert workload.load("lenet-digits").recipe.optimizer == "sgd"


def test_digits_split_and_model(digits):
    wl, train, test = digits
    assert len(train) + len(test) == 1797 and len(test) == 360
    x, y = workload.collate(train, range(5))
    assert wl.build_model()(x).shape == (5, 10)


def test_mnist1d_is_generated_locally():
    wl = workload.load("cnn1d-mnist1d")
    state = np.random.get_state()[1].copy()
    train, test = wl.build_datasets(None, 0)
    assert (np.random.get_state()[1] == state).all()          # the global RNG is left alone
    assert (len(train), len(test)) == (4000, 1000)
    x, _ = train[:4]
    assert wl.build_model()(x).shape == (4, 10)


def test_cifar_without_data_says_how_to_get_it(tmp_path):
    wl = workload.load("resnet-cifar10")
    with pytest.raises(UserError, match="--data-dir"):
        wl.build_datasets(None, 0)
    with pytest.raises(UserError, match="cifar-10-batches-py"):
        wl.build_datasets(str(tmp_path), 0)
    assert wl.build_model()(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_shards_are_disjoint_and_cover():
    n = 100
    indexed = torch.utils.data.TensorDataset(torch.arange(n), torch.zeros(n, dtype=torch.long))
    shards = []
    for shard in range(3):
        size = len(range(shard, n, 3))
        x, _ = next(workload.batches(indexed, size, seed=1, shard=shard, n_shards=3))
        shards.append(set(x.tolist()))
        assert len(shards[-1]) == size               # one epoch visits each sample once
    assert set.union(*shards) == set(range(n))
    assert sum(len(s) for s in shards) == n


def test_batches_are_reproducible(digits):
    _, train, _ = digits
    a = next(workload.batches(train, 8, seed=3))[1]
    b = next(workload.batches(train, 8, seed=3))[1]
    c = next(workload.batches(train, 8, seed=4))[1]
    assert torch.equal(a, b) and not torch.equal(a, c)


GENERATED = """import torch
from torch.utils.data import TensorDataset
CACHE_DATASETS = True
BUILT = []
def build_model():
    return torch.nn.Linear(3, 2)
def build_datasets(data_dir, seed):
    BUILT.append(seed)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 3, generator=g)
    return TensorDataset(x[:30], (x[:30, 0] > 0).long()), TensorDataset(x[30:], (x[30:, 0] > 0).long())
"""


def test_generated_datasets_are_built_once_then_loaded_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNITUNE_CACHE_DIR", str(tmp_path / "cache"))
    f = tmp_path / "gen.py"
    f.write_text(GENERATED)
    wl = workload.load(str(f))
    first = wl.build_datasets(None, 0)
    again = wl.build_datasets(None, 3)                # any seed: the workload says the data ignores it
    assert wl.module.BUILT == [0]
    assert all(torch.equal(a, b) for d, e in zip(first, again) for a, b in zip(d.tensors, e.tensors))
    assert list((tmp_path / "cache" / "datasets").iterdir()) == [wl.cache_path()]
    # A user's data directory is never cached; nor is anything when the cache is off.
    wl.build_datasets(str(tmp_path), 0)
    monkeypatch.setenv("OMNITUNE_CACHE_DIR", "off")
    wl.build_datasets(None, 0)
    assert wl.module.BUILT == [0, 0, 0]


def test_a_changed_workload_file_or_a_broken_cache_file_builds_again(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNITUNE_CACHE_DIR", str(tmp_path / "cache"))
    f = tmp_path / "gen.py"
    f.write_text(GENERATED)
    wl = workload.load(str(f))
    wl.build_datasets(None, 0)
    wl.cache_path().write_bytes(b"half a file")
    wl.build_datasets(None, 0)
    assert wl.module.BUILT == [0, 0]
    f.write_text(GENERATED.replace("manual_seed(0)", "manual_seed(1)"))
    changed = workload.load(str(f))
    assert changed.cache_path() != wl.cache_path()
    changed.build_datasets(None, 0)
    assert changed.module.BUILT == [0]
    assert list(changed.cache_path().parent.iterdir()) == [changed.cache_path()]     # the old one is gone


def test_a_workload_that_does_not_ask_for_the_cache_is_built_every_time(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNITUNE_CACHE_DIR", str(tmp_path / "cache"))
    f = tmp_path / "plain.py"
    f.write_text(GENERATED.replace("CACHE_DATASETS = True", ""))
    wl = workload.load(str(f))
    wl.build_datasets(None, 0)
    wl.build_datasets(None, 0)
    assert wl.module.BUILT == [0, 0] and wl.cache_path() is None


LABELLED = """import torch
from torch.utils.data import Dataset, TensorDataset
def build_model():
    return torch.nn.Linear(3, 4)
class Listed(Dataset):
    def __init__(self, y):
        self.y = y
    def __len__(self):
        return len(self.y)
    def __getitem__(self, i):
        return torch.zeros(3), self.y[i]
def build_datasets(data_dir, seed):
    y = torch.tensor([0] * 60 + [1] * 30 + [3] * 10)      # frequencies 0.6, 0.3, 0, 0.1
    return TensorDataset(torch.zeros(100, 3), y), Listed([int(v) for v in y])
"""


def test_the_label_loss_is_the_entropy_of_the_training_labels_frequencies(tmp_path):
    """A model that predicts the labels' frequencies, and nothing from the inputs, has this loss:
    cross-entropy at the frequencies' logits, on any kind of dataset."""
    f = tmp_path / "labelled.py"
    f.write_text(LABELLED)
    wl = workload.load(str(f))
    tensors, listed = wl.build_datasets(None, 0)
    p = torch.tensor([0.6, 0.3, 0.0, 0.1])
    logits = torch.log(p.clamp_min(1e-30)).expand(100, 4)
    expected = float(torch.nn.functional.cross_entropy(logits, tensors.tensors[1]))
    assert expected == pytest.approx(-(0.6 * np.log(0.6) + 0.3 * np.log(0.3) + 0.1 * np.log(0.1)))
    assert workload.label_loss(wl, tensors) == pytest.approx(expected)
    assert workload.label_loss(wl, listed) == pytest.approx(expected)
    labelled = TensorDataset(torch.zeros(4, 3), torch.tensor([2, -100, 2, 0]))    # cross-entropy skips -100
    assert workload.label_loss(wl, labelled) == pytest.approx(-(2 / 3 * np.log(2 / 3) + 1 / 3 * np.log(1 / 3)))
    assert workload.label_loss(wl, TensorDataset(torch.zeros(4, 3), torch.full((4,), 7))) == 0.0   # one class
    assert workload.label_loss(wl, TensorDataset(torch.zeros(0, 3), torch.zeros(0).long())) is None
    big = TensorDataset(torch.zeros(2, 3), torch.tensor([0, 2 ** 40]))              # counted, not binned
    assert workload.label_loss(wl, big) == pytest.approx(np.log(2))
    halves = type(listed)([0] * 500 + [1] * 500)                                     # 100 of them, drawn
    assert workload.label_loss(wl, halves, samples=100) == pytest.approx(np.log(2), abs=0.02)


@pytest.mark.parametrize("change, why", [
    ("def loss_fn(out, y):\n    return ((out[:, 0] - y) ** 2).mean()\n", "its own loss"),
    ("def build_datasets(data_dir, seed):\n    return (TensorDataset(torch.zeros(8, 3), torch.rand(8)),) * 2\n",
     "float targets"),
    ("def build_datasets(data_dir, seed):\n    return (TensorDataset(torch.zeros(8, 3), torch.zeros(8, 2).long()),) * 2\n",
     "a label per position"),
    ("def build_datasets(data_dir, seed):\n    return (TensorDataset(torch.zeros(8, 3), torch.arange(8) - 1),) * 2\n",
     "a negative label"),
    ("def build_datasets(data_dir, seed):\n    return (TensorDataset(torch.zeros(8, 3), torch.arange(8) > 3),) * 2\n",
     "bool labels"),
    ("def build_datasets(data_dir, seed):\n    return (Listed([[0, 1]] * 4 + [[1]] * 4),) * 2\n", "uneven labels"),
])
def test_no_label_loss_where_the_labels_are_not_class_indices_of_the_default_loss(tmp_path, change, why):
    f = tmp_path / "other.py"
    f.write_text(LABELLED + change)
    wl = workload.load(str(f))
    assert workload.label_loss(wl, wl.build_datasets(None, 0)[0]) is None, why
