"""Which process does what: a pure function from a plan to each rank's role.

Ranks: with a parameter server (every protocol but `sync`), rank 0 is the server and the workers
follow; otherwise the workers start at rank 0. Workers are numbered group by group, so a group's
first rank is its leader, the one that talks to the server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from omnitune.cluster import Device
from omnitune.plan import Plan


@dataclass(frozen=True)
class Role:
    rank: int
    kind: Literal["server", "worker"]
    device: Device | None = None
    group: int = -1                       # compute-group index; -1 for the server
    group_ranks: tuple[int, ...] = ()     # every rank of this worker's group, leader first
    shard: int = -1                       # which slice of the training set this worker reads
    batch_size: int = 0

    @property
    def leader(self) -> bool:
        return self.kind == "worker" and self.rank == self.group_ranks[0]

    @property
    def coordinator(self) -> bool:
        """The rank that evaluates, logs metrics and writes the checkpoint and summary."""
        return self.rank == 0


def roles(plan: Plan) -> list[Role]:
    out: list[Role] = []
    if plan.server:
        out.append(Role(rank=0, kind="server"))
    rank = len(out)
    shard = 0
    for g, members in enumerate(plan.groups):
        ranks = tuple(range(rank, rank + len(members)))
        for device_id in members:
            device = next(d for d in plan.devices if d.id == device_id)
            out.append(Role(rank=rank, kind="worker", device=device, group=g, group_ranks=ranks,
                            shard=shard, batch_size=plan.batch_size[device_id]))
            rank += 1
            shard += 1
    return out


def group_ranks(plan: Plan) -> list[tuple[int, ...]]:
    """Ranks of each compute group, in the order every process must create them."""
    by_group: dict[int, tuple[int, ...]] = {}
    for r in roles(plan):
        if r.kind == "worker":
            by_group[r.group] = r.group_ranks
    return [by_group[g] for g in sorted(by_group)]
