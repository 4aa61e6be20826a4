"""The first phase: the sink's folder, checked before any data is read (plan → OutputFolder).

The sink must lie apart from every input and from any other gpuetl dataset, and a read-only
folder is refused before any work is done (docs/design.md, "Output commit"); the folder's own
survey and lock come when the run enters it."""

from __future__ import annotations

import os
from pathlib import Path

from ...plan.compile import Plan
from ...sinks import commit as commit_protocol
from ...sinks.base import get_sink
from ...sinks.objectstore import check_remote_apart_from_inputs
from ...storage import is_remote


def check_apart_from_inputs(plan: Plan):
    """The sink's path, refused where it equals, holds or lies inside an input or where a source
    pattern reads (what `run` and `validate` both check before reading a record): the path, made
    absolute and normal if local (`out/new/..` is `out`)."""
    spec = plan.spec
    if is_remote(plan.out_dir):           # an object store: sinks/objectstore.py
        check_remote_apart_from_inputs(plan.out_dir, [f.url or f.path for f in plan.files], spec.source.paths)
        return plan.out_dir
    out = Path(os.path.normpath(os.path.abspath(plan.out_dir)))
    commit_protocol.check_apart_from_inputs(out, [f.path for f in plan.files], spec.source.paths,
                                            plan.loaded.base_dir)
    return out


def open_output(plan: Plan, log):
    """The sink's OutputFolder for this plan (a context manager: entering it takes the lock).
    A local sink.path is made absolute and normal here (plan.out_dir)."""
    spec = plan.spec
    sink = get_sink(spec.sink.type)
    out = plan.out_dir = check_apart_from_inputs(plan)
    if is_remote(out):
        return sink.output_folder(out, log, storage_options=spec.sink.storage_options)
    commit_protocol.survey_read_only(out, spec.sink.mode)
    folder = sink.output_folder(out, log)
    if not spec.sink.durable:             # sink.durable: false, for this folder only (gpuetl/durable.py)
        folder.durable = False
    return folder
