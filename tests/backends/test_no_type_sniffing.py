"""Code outside gpuetl/backends/ asks the backend (everything it may use is declared on
backends.base.Backend); it never checks which library a frame or module comes from, nor whether
a backend happens to have a method. A grep over the package, with the few exceptions named."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "gpuetl"

SNIFFING = {
    "hasattr/getattr on a backend": re.compile(r"\b(has|get)attr\(\s*(self\.|ctx\.)?(backend|xp|xd)\b"),
    "a library-specific method looked for": re.compile(
        r"\bhasattr\([^,]+,\s*[\"'](to_pandas|to_arrow|to_numpy|to_cupy|values_host|nulls|dtype|str|dt|"
        r"local_cluster|versions|io_path|parse_csv|seterr)[\"']"),
    "a module's name compared": re.compile(
        r"__name__[\"')\]]*\s*(==|!=|\bin\b)(?!\s*[\"']__main__)|__name__.*\.(split|startswith)\(|"
        r"__name__.*[\"'](pandas|cudf|numpy|cupy)\b"),
    "a step's or source's attribute looked for": re.compile(r"\b(has|get)attr\(\s*(step|source)\b"),
    "a frame's library checked": re.compile(r"isinstance\([^)]*\b(pd|pandas|cudf|cp|cupy)\.(Series|DataFrame|Index|ndarray)\b"),
}

# (file, the line's text) -> why it stays. Empty now: the source stage's optional parts are
# declared on its contract (sources/registry.py: RecordStage, sources/stage.py: SourceStage).
ALLOWED: dict[tuple[str, str], str] = {}


def _hits():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("backends/"):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            code = line.split("#", 1)[0]
            for what, pattern in SNIFFING.items():
                if pattern.search(code) and (rel, line.strip()) not in ALLOWED:
                    yield f"gpuetl/{rel}:{number}: {what}: {line.strip()}"


def test_no_caller_sniffs_a_backend_frame_or_module():
    hits = list(_hits())
    assert not hits, "declare it on backends.base.Backend (or the step's or source's protocol) and call it:\n" + "\n".join(hits)


def test_every_allowed_line_still_exists():
    """An exception whose line is gone is removed from the list, so the list stays honest."""
    lines = {(rel, text) for rel, text in ALLOWED}
    present = {(path.relative_to(PACKAGE).as_posix(), line.strip())
               for path in PACKAGE.rglob("*.py") for line in path.read_text(encoding="utf-8").splitlines()}
    assert lines <= present, sorted(lines - present)


def test_the_check_finds_what_it_looks_for():
    """The patterns match the forms they forbid (a check that cannot fail checks nothing)."""
    samples = {
        "hasattr/getattr on a backend": 'make = getattr(backend, "local_cluster", None)',
        "a library-specific method looked for": 'x = x.to_pandas() if hasattr(x, "to_pandas") else x',
        "a module's name compared": 'pandas = getattr(xd, "__name__", "").split(".")[0] == "pandas"',
        "a frame's library checked": "if isinstance(col, pd.Series):",
        "a step's or source's attribute looked for": 'if hasattr(step, "look_ahead"):',
    }
    for what, line in samples.items():
        assert SNIFFING[what].search(line), what
    assert SNIFFING["a module's name compared"].search('if xd.__name__ == "cudf":')
    assert not SNIFFING["a module's name compared"].search('if __name__ == "__main__":')
    assert not SNIFFING["a module's name compared"].search('raise ValueError(f"got {type(x).__name__}")')
