"""The plan's totals are computed once: progress asks after every partition."""

from __future__ import annotations

import gpuetl


class CountingList(list):
    walks = 0

    def __iter__(self):
        CountingList.walks += 1
        return super().__iter__()


def test_input_bytes_is_summed_once_however_often_it_is_asked(tmp_path):
    for i in range(3):
        (tmp_path / f"{i}.log").write_text("a line\n" * (i + 1))
    spec = {"version": 1, "name": "t", "source": {"type": "text", "path": "*.log"}, "parse": {"regex": "(?P<line>.*)"},
            "sink": {"path": "out"}}
    plan = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).plan()
    plan.files = CountingList(plan.files)
    assert [plan.input_bytes for _ in range(1000)] == [7 + 14 + 21] * 1000
    assert CountingList.walks == 1       # not once per partition done (quadratic at a million files)
