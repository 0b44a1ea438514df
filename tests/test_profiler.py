from omnitune import profiler
from omnitune.cluster import local_cluster
from omnitune.runtime.profile_worker import message_sizes, p2p_partner
from omnitune.runtime.topology import Node


def test_message_sizes_span_latency_and_bandwidth():
    sizes = message_sizes(153128)
    assert sizes[0] == 4096 and 153128 in sizes and max(sizes) == 4 * 153128
    assert all(s % 4 == 0 for s in sizes)


def test_host_facts():
    facts = profiler.host_facts()
    assert facts.cpu_count >= 1 and facts.torch


def test_calibration_runs_every_variant_the_planner_may_choose():
    cluster = local_cluster(cpu_count=4, cuda_count=0)
    specs = profiler.calibration_specs(cluster, "one-per-core", "lenet-digits", None, (8, 32))
    keys = {(s.variant.key, len(s.groups)) for s in specs}
    assert keys == {("sync", 1), ("groups", 2), ("groups", 4), ("softsync/n=1", 4), ("softsync/n=2", 4),
                    ("softsync/n=4", 4), ("hpsgd", 1), ("gossip/every=1", 1), ("gossip/every=4", 1)}
    assert all(s.target_accuracy is None for s in specs)         # they train for their time
    server_only = profiler.calibration_specs(cluster, "one-per-core", "lenet-digits", None, (8,), server_only=True)
    assert server_only and all(s.variant.has_server for s in server_only)


def test_round_trips_cross_the_link_between_nodes_when_there_is_one():
    one = (Node(0, "127.0.0.1", (0, 1, 2)),)
    assert p2p_partner(one) == 1
    two = (Node(0, "10.0.0.1", (0, 1)), Node(1, "10.0.0.2", (2, 3)))
    assert p2p_partner(two) == 2
    server_second = (Node(0, "10.0.0.1", (1,)), Node(1, "10.0.0.2", (0, 2)))
    assert p2p_partner(server_second) == 1
