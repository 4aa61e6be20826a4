"""Declared JSON columns that read one value two ways: the error names both columns and what each
does with the value, at the line of the key that clashed (Elastic's NGINX Plus status JSON:
`upstreams.trac-backend.peers` declared whole beside a path into one of its items)."""

from __future__ import annotations

import json

from .test_spec import folder, line_of, refused

RECORD = {"upstreams": {"trac-backend": {"peers": [{"server": "10.0.0.1:80", "active": 2}]}}}


def test_a_path_into_a_list_declared_whole_names_both_columns_at_its_line(tmp_path, capsys):
    file = folder(tmp_path, """\
        version: 1
        name: nginx
        source: {type: jsonl, path: in/x.jsonl}
        columns:
          upstreams.trac-backend.peers: "list<struct<server: string, active: int64>>"
          upstreams.trac-backend.peers[0].server: string
        sink: {path: out}
        """, {"in/x.jsonl": json.dumps(RECORD) + "\n"})
    message = refused(capsys, file)
    line = line_of(file, "peers[0].server")
    assert f"pipe.yaml:{line}: columns.upstreams.trac-backend.peers[0].server: the column " \
           "'upstreams.trac-backend.peers[0].server' reaches inside 'upstreams.trac-backend.peers', which the " \
           "column 'upstreams.trac-backend.peers' reads whole as list<item: struct<server: string, active: int64>>" \
           in message, message
    assert "and another column reads it as a list" not in message


def test_the_other_order_says_the_same_at_the_whole_columns_line(tmp_path, capsys):
    file = folder(tmp_path, """\
        version: 1
        name: nginx
        source: {type: jsonl, path: in/x.jsonl}
        columns:
          upstreams.trac-backend.peers[0].server: string
          upstreams.trac-backend.peers: "list<struct<server: string, active: int64>>"
        sink: {path: out}
        """, {"in/x.jsonl": json.dumps(RECORD) + "\n"})
    message = refused(capsys, file)
    line = line_of(file, 'peers: "list')
    assert f"pipe.yaml:{line}: columns.upstreams.trac-backend.peers: the column 'upstreams.trac-backend.peers' " \
           "reads 'upstreams.trac-backend.peers' whole as list<item: struct<server: string, active: int64>>, and the " \
           "column 'upstreams.trac-backend.peers[0].server' reaches inside it" in message, message
