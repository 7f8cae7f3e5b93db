"""Dynamic batching for packages compiled with a batch dimension > 1 (static shapes, as with
TensorRT engines): requests of 1..B rows are stacked along dimension 0 and padded up to the
compiled batch B; each request gets its own rows of the outputs back. Padding repeats the last
real row rather than zeros, so a model that normalises its input never sees a degenerate row.
This assumes rows are independent (no op mixes the batch), which holds for inference graphs."""
from __future__ import annotations

import numpy as np


def compiled_batch(manifest: dict) -> int | None:
    """B when every input and output has the same static leading dimension B > 1, else None."""
    dims = [s["shape"][0] if s["shape"] and isinstance(s["shape"][0], int) else None
            for s in [*manifest["inputs"], *manifest["outputs"]]]
    if not dims or len(set(dims)) != 1 or dims[0] is None or dims[0] <= 1:
        return None
    return dims[0]


def stack(jobs, batch: int) -> tuple[dict, list[tuple[int, int]]]:
    """Feeds of ``batch`` rows from ``jobs`` (each with ``feeds`` and ``rows``) and each job's
    row range."""
    spans, start = [], 0
    for j in jobs:
        spans.append((start, start + j.rows))
        start += j.rows
    if start > batch:
        raise ValueError(f"{start} rows do not fit a batch of {batch}")
    feeds = {}
    for name in jobs[0].feeds:
        parts = [j.feeds[name] for j in jobs]
        if start < batch:
            last = parts[-1][-1:]
            parts.append(np.repeat(last, batch - start, axis=0))
        feeds[name] = np.concatenate(parts, axis=0)
    return feeds, spans


def split(outputs: dict, spans) -> list[dict]:
    return [{n: np.ascontiguousarray(v[a:b]) for n, v in outputs.items()} for a, b in spans]
