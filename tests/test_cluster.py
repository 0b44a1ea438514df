import pytest

from omnitune.core.cluster import load_cluster, local_cluster
from omnitune.core.errors import UserError


def test_local_cluster_offers_both_layouts():
    c = local_cluster(cpu_count=4, cuda_count=1)
    assert c.layouts["one-per-core"] == ("cpu0", "cpu1", "cpu2", "cpu3")
    assert c.layouts["one-worker"] == ("cpu-all",)
    assert c.layouts["gpus+one-worker"] == ("cuda0", "cpu-rest") and c.device("cpu-rest").threads == 3
    assert c.device("cpu-all").threads == 4
    assert c.device("cuda0").kind == "cuda" and c.device("cuda0").cuda_index == 0
    assert set(c.hosts) == {"127.0.0.1"}


def test_threads_per_worker_between_one_per_core_and_one_on_all():
    c = local_cluster(cpu_count=16, cuda_count=1)
    assert list(c.layouts) == ["one-per-core", "8-workers", "4-workers", "2-workers", "one-worker", "gpus",
                               "gpus+per-core", "gpus+one-worker"]
    assert c.layouts["4-workers"] == ("cpu4x0", "cpu4x1", "cpu4x2", "cpu4x3")
    assert {c.device(d).threads for d in c.layouts["4-workers"][:4]} == {4}
    assert list(local_cluster(cpu_count=2, cuda_count=0).layouts) == ["one-per-core", "one-worker"]


def test_single_core_machine_has_one_layout():
    assert list(local_cluster(cpu_count=1, cuda_count=0).layouts) == ["one-per-core"]


def test_yaml_spec(tmp_path):
    spec = tmp_path / "c.yaml"
    spec.write_text("nodes:\n  - host: 127.0.0.1\n    cpu_workers: [1, 2]\n    gpus: [0]\n")
    c = load_cluster(spec)
    assert [d.id for d in c.devices] == ["cpu0", "cpu1", "cuda0"]
    assert c.device("cpu1").threads == 2
    assert c.rendezvous == "127.0.0.1:0" and c.server_host == "127.0.0.1"


def test_json_spec_with_two_nodes(tmp_path):
    spec = tmp_path / "c.json"
    spec.write_text('{"schema_version": 1, "nodes": [{"host": "10.0.0.1", "cpu_workers": [1]},'
                    ' {"host": "10.0.0.2", "cpu_workers": [1]}], "rendezvous": "10.0.0.1:29400"}')
    c = load_cluster(spec)
    assert [d.id for d in c.devices] == ["n0-cpu0", "n1-cpu0"]
    assert [d.node for d in c.devices] == [0, 1]
    assert c.hosts == ("10.0.0.1", "10.0.0.2")
    assert (c.server_host, c.server_node) == ("10.0.0.1", 0)


def test_two_nodes_on_one_host_get_a_fixed_port_and_the_named_server_node(tmp_path):
    """Nodes are told apart by their place in the spec, so two can share a host (as in the tests);
    several nodes cannot each pick a free port, so they get torchrun's default."""
    spec = tmp_path / "c.yaml"
    spec.write_text("nodes:\n  - host: localhost\n  - host: 127.0.0.1\n    gpus: [0]\nserver_host: 127.0.0.1\n")
    c = load_cluster(spec)
    assert [(d.id, d.node, d.host) for d in c.devices] == \
        [("n0-cpu0", 0, "localhost"), ("n1-cpu0", 1, "127.0.0.1"), ("n1-cuda0", 1, "127.0.0.1")]
    assert (c.rendezvous, c.server_node) == ("localhost:29400", 1)


@pytest.mark.parametrize("text, needle", [
    ("nodes: []", "at least one node"),
    ("nodes:\n  - cpu_workers: [0]", "threads must be at least 1"),
    ("nodes:\n  - cpu_workers: []", "no cpu_workers or gpus"),
    ("nodes:\n  - gpus: [-1]", "gpus: a GPU index must be at least 0"),
    ("nodes:\n  - cpus: 3", "unknown key 'cpus'"),
    ("nodes: [", "not valid YAML"),
    ("- 1", "expected a mapping"),
    ("nodes:\n  - host: a\nserver_host: b", "server_host: 'b' is not the host of any node"),
    ("nodes:\n  - host: a\nrendezvous: b:29400", "rendezvous: 'b' is not the host of any node"),
    ("nodes:\n  - host: a\nrendezvous: a", "rendezvous must be HOST:PORT"),
    ("nodes:\n  - host: a\nrendezvous: 'a:65535'", "port below 65535"),
])
def test_bad_specs(tmp_path, text, needle):
    spec = tmp_path / "c.yaml"
    spec.write_text(text)
    with pytest.raises(UserError, match=needle):
        load_cluster(spec)
