"""Glob expansion: the same names as glob.glob(recursive=True) on trees without links, and a
finite walk where links lead back up."""

from __future__ import annotations

import glob
import os

import pytest

from gpuetl.sources.files import expand, resolve_inputs

TREE = ["a.log", "b.txt", ".hidden.log", "sub/c.log", "sub/deep/d.log", "sub/.dot/e.log", ".git/f.log",
        "x[1]/g.log", "sub/deep/h.txt"]
PATTERNS = ["*.log", "**/*.log", "**", "sub/**/*.log", "sub/*/*.log", "*/*.log", ".*", "**/.*", "sub/**",
            "**/deep/*", "s?b/*.log", "[ab].*", "sub/.dot/*.log", "nothing/**/*.log", "a.log", "sub//c.log"]


@pytest.fixture
def tree(tmp_path):
    for name in TREE:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x\n")
    return tmp_path


@pytest.mark.parametrize("pattern", PATTERNS)
def test_expand_names_what_glob_names(tree, pattern):
    want = {os.path.normpath(p) for p in glob.glob(os.path.join(glob.escape(str(tree)), pattern), recursive=True)}
    got = {os.path.normpath(p) for p in expand(pattern, tree)}
    assert got == want


def test_absolute_patterns(tree):
    assert sorted(expand(str(tree / "sub" / "*.log"), tree / "elsewhere")) == [str(tree / "sub" / "c.log")]


def test_links_back_up_end_the_walk(tree):
    os.symlink("..", tree / "sub" / "deep" / "up")
    os.symlink(str(tree), tree / "sub" / "root")
    found = expand("**/*.log", tree)
    assert len(found) < 20                              # finite; glob.glob names dozens
    files = resolve_inputs(["**/*.log"], tree, "infer")
    assert [f.display for f in files] == ["a.log", "sub/c.log", "sub/deep/d.log", "x[1]/g.log"]


def test_relative_to_names_each_path_as_relpath_does_inside_outside_and_above_the_folder():
    """The planner's relative names (cut inside the folder, worked out once per folder outside
    it) are os.path.relpath's, for the folder itself, folders above it and beside it, and root."""
    import os

    from gpuetl.sources.files import relative_to

    cases = [("/a/b/c.jpg", "/a/b"), ("/a/b/c.jpg", "/a/b/"), ("/a/b", "/a/b"), ("/a/bc/d", "/a/b"),
             ("/x/y/z.jpg", "/a/b"), ("/", "/a"), ("/a", "/"), ("/a/b/c", "/a/b/c/d"), ("/a", "/a/b"),
             ("/a/b", "/a/b/c"), ("/a/b/c", "/a/b/d/e"), ("/", "/"), ("/a/b/x/y.jpg", "/a/b/x/q")]
    for path, folder in cases:
        assert relative_to(path, folder) == os.path.relpath(path, folder), (path, folder)
