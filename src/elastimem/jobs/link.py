"""The link job: a new turn's chunks joined to the graph's nodes they name."""

from __future__ import annotations

from .. import graph
from ..runtime import queue as jobs
from ..runtime.services import Services


def run_link(services: Services, job: jobs.Job) -> None:
    ids = [int(i) for i in job.payload.get("chunk_ids", []) if isinstance(i, int)]
    if ids:
        with services.db.atomic() as conn:
            graph.link_chunks(conn, ids)
