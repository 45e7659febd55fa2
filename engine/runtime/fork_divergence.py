"""How far a fork group's variants have drifted, read on the host: one ``Divergence`` event
per group and step, from the Jensen–Shannon values computed on the device
(``engine.sampling.divergence``), and the first index at which each pair drew different tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.api.events import Divergence
from engine.runtime.requests import Request


class ForkDivergence:
    """The first differing index of every pair still running; held by the scheduler."""

    def __init__(self) -> None:
        self.first_difference: dict[tuple[int, int], int | None] = {}

    def events(self, requests: list[Request], pairs: list[tuple[int, int]], js: Sequence[float]) -> list[Divergence]:
        """One Divergence per fork group in this step, and the first differing index per pair."""
        by_group: dict[int, list[int]] = {}
        for k, (i, _) in enumerate(pairs):
            by_group.setdefault(requests[i].group, []).append(k)
        out = []
        for group, ks in by_group.items():
            ids, firsts = [], []
            for k in ks:
                a, b = requests[pairs[k][0]], requests[pairs[k][1]]
                key = (a.id, b.id)
                if self.first_difference.get(key) is None and a.generated[-1] != b.generated[-1]:
                    self.first_difference[key] = a.next_index - 1
                ids.append(key)
                firsts.append(self.first_difference.get(key))
            index = requests[pairs[ks[0]][0]].next_index - 1
            out.append(Divergence(group, index, tuple(ids), tuple(float(js[k]) for k in ks), tuple(firsts)))
        return out

    def keep(self, active: set[int]) -> None:
        """Forget the pairs with a member that left: they will not diverge again."""
        if self.first_difference:
            self.first_difference = {p: f for p, f in self.first_difference.items() if active.issuperset(p)}
