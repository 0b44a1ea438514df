"""Which process does what: a pure function from a run spec to each rank's role.

Ranks: with a parameter server (the variant says whether), rank 0 is the server and the workers
follow; otherwise the workers start at rank 0. Workers are numbered group by group, so a group's
first rank is its leader, the one that talks to the server.

Nodes: each node of the cluster spec starts its own processes (`omnitune run --node-rank I`), its
ranks in rank order. torchelastic numbers processes its own way; these ranks, not its, are the
ones every process joins the process group with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from omnitune.core.cluster import Device
from omnitune.core.runspec import RunSpec


@dataclass(frozen=True)
class Role:
    rank: int
    kind: Literal["server", "worker"]
    device: Device | None = None
    group: int = -1                       # compute-group index; -1 for the server
    group_ranks: tuple[int, ...] = ()     # every rank of this worker's group, leader first
    shard: int = -1                       # which slice of the training set this worker reads
    batch_size: int = 0
    node: int = 0                         # the cluster spec's node this process runs on
    host: str = ""

    @property
    def leader(self) -> bool:
        return self.kind == "worker" and self.rank == self.group_ranks[0]

    @property
    def coordinator(self) -> bool:
        """The rank that evaluates, logs metrics and writes the checkpoint and summary."""
        return self.rank == 0


def roles(spec: RunSpec) -> list[Role]:
    out: list[Role] = []
    if spec.server:
        out.append(Role(rank=0, kind="server", node=spec.server_node, host=spec.server_host))
    rank = len(out)
    shard = 0
    for g, members in enumerate(spec.groups):
        ranks = tuple(range(rank, rank + len(members)))
        for device_id in members:
            device = spec.device(device_id)
            out.append(Role(rank=rank, kind="worker", device=device, group=g, group_ranks=ranks,
                            shard=shard, batch_size=spec.batch_size[device_id], node=device.node, host=device.host))
            rank += 1
            shard += 1
    return out


def group_ranks(spec: RunSpec) -> list[tuple[int, ...]]:
    """Ranks of each compute group, in the order every process must create them."""
    by_group: dict[int, tuple[int, ...]] = {}
    for r in roles(spec):
        if r.kind == "worker":
            by_group[r.group] = r.group_ranks
    return [by_group[g] for g in sorted(by_group)]


@dataclass(frozen=True)
class Node:
    index: int                  # in the cluster spec: `--node-rank`
    host: str
    ranks: tuple[int, ...]      # of its processes; local rank i runs ranks[i]


def nodes(spec: RunSpec) -> tuple[Node, ...]:
    """The nodes that run processes of this run, in cluster-spec order."""
    return placed_nodes([(r.node, r.host) for r in roles(spec)])


def placed_nodes(placement: list[tuple[int, str]]) -> tuple[Node, ...]:
    """Nodes from where each rank runs, (node, host) in rank order."""
    ranks: dict[int, list[int]] = {}
    hosts: dict[int, str] = {}
    for rank, (n, host) in enumerate(placement):
        ranks.setdefault(n, []).append(rank)
        hosts[n] = host
    return tuple(Node(n, hosts[n], tuple(ranks[n])) for n in sorted(ranks))
