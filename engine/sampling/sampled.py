"""What one step sampled: its tokens on the device, the inspection pack, and where each
row's inspection sits in it (``engine.sampling.inspection.PackLayout``), finished on the
host into each row's :class:`engine.sampling.unpack.RowInspection`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from engine.sampling.inspection import UNTRUSTED_Z, PackLayout
from engine.sampling.unpack import CountOf, RowInspection, to_host, unpack_row, unpack_rows


@dataclass
class Sampled:
    tokens: mx.array
    """[B] int32, on the device (speculative decode feeds them to the next forward pass)."""
    packed: mx.array
    """[N] float32 inspection data: each group's rows (``engine.sampling.inspection.PackLayout``),
    group after group; ``places`` says where each batch row is."""
    top_n: int
    chains: list[tuple[str, ...]]
    """Each row's own chain (without ``raw``)."""
    final: mx.array
    """[B, V] logits after each row's last stage, batch order (for fork divergences)."""
    places: list[tuple[int, PackLayout]]
    """Each batch row's offset in ``packed`` and its group's layout."""
    whole: Callable[[], mx.array] | None = None
    """``packed`` again with no statistics derived (``engine.sampling.inspection.pack_outputs``'s
    ``derive``), for a step where a derived one is too small to trust; None: none was derived."""

    def trusted(self, host: np.ndarray) -> np.ndarray:
        """``host`` (``packed`` on the host, maybe with more after it), or where a row's
        derived statistics are too small to trust (``engine.sampling.unpack.untrusted``; a
        bias that lowered raw's best tokens some 50 nats under the rest), a copy with the
        step packed again whole. Rare: a second step's pack, on the device, once."""
        if self.whole is None:
            return host
        at = [offset + layout.bias_z for offset, layout in self.places if layout.bias_z is not None]
        if not (host[at] < UNTRUSTED_Z).any():
            return host
        fixed = host.copy()
        whole = to_host(self.whole())
        fixed[: whole.size] = whole
        return fixed

    def take(self, keep: Sequence[int]) -> Sampled:
        """The rows ``keep`` (the others left the batch); ``packed`` stays as it is."""
        index = mx.array(list(keep), dtype=mx.int32)
        chains, places = [self.chains[i] for i in keep], [self.places[i] for i in keep]
        return Sampled(self.tokens[index], self.packed, self.top_n, chains, self.final[index], places, self.whole)

    def unpack(
        self, host: np.ndarray, row: int, row_top_n: int, text_of: Callable[[int], str], count_of: CountOf
    ) -> RowInspection:
        """Row ``row`` of ``host`` (``packed`` on the host) as a :class:`RowInspection`;
        ``count_of``: the row's counts before the step (:meth:`SamplingBatch.counter`)."""
        offset, layout = self.places[row]
        block = self.trusted(host)[offset : offset + layout.width]
        return unpack_row(block, layout, row_top_n, self.chains[row], text_of, count_of)

    def unpack_all(
        self, host: np.ndarray, row_top_ns: Sequence[int], text_of: Callable[[int], str], counts: Sequence[CountOf]
    ) -> list[RowInspection]:
        """Every row of ``host`` in batch order (:meth:`unpack` of each), the rows of a layout
        finished together (``engine.sampling.unpack.unpack_rows``)."""
        host = self.trusted(host)
        by_layout: dict[PackLayout, list[int]] = {}
        for row, (_, layout) in enumerate(self.places):
            by_layout.setdefault(layout, []).append(row)
        out: list[RowInspection] = [None] * len(self.places)  # type: ignore[list-item]
        for layout, rows in by_layout.items():
            offsets = [self.places[r][0] for r in rows]
            start, end = offsets[0], offsets[0] + len(rows) * layout.width
            if offsets == list(range(start, end, layout.width)):  # one group's rows, in order: a view
                block = host[start:end].reshape(len(rows), layout.width)
            else:
                block = host[np.array(offsets)[:, None] + np.arange(layout.width)]
            chains, top_ns = [self.chains[r] for r in rows], [row_top_ns[r] for r in rows]
            unpacked = unpack_rows(block, layout, top_ns, chains, text_of, [counts[r] for r in rows])
            for row, inspection in zip(rows, unpacked, strict=True):
                out[row] = inspection
        return out
