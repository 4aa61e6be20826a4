"""The docs name only modules, folders and functions that exist, and say what is true today.

docs/design.md is read by whoever changes gpuetl, so every `path.py`, every package folder and
every `name()` it cites must be in the tree: a path resolves to a file of the repository (a
path relative to the package, as the doc writes `sinks/commit.py`, counts), a `path.py: name`
or a `module.name` names something that module defines, a bare `name()` is a `def` or `class`
somewhere in gpuetl/, benchmarks/ or tests/, the module map names modules of its folders, and a
private `_name` is defined in the module its paragraph last cited. Names of other libraries
(`gc.freeze()`, `pc.strptime`) are left alone by their module prefix. The same check runs over
every doc; benchmarks/README.md and docs/gpu.md have a test each for what they must say.
"""

from __future__ import annotations

import builtins
import os
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SEARCHED = ("gpuetl", "benchmarks", "tests")
SKIPPED = {"__pycache__", "node_modules", "data", "results"}

# Modules and objects of other libraries the docs name (the head of a dotted name).
FOREIGN = {
    "gc", "sys", "os", "shutil", "json", "pc", "pa", "pq", "np", "xp", "pl", "pd", "dd", "warnings",
    "inspect", "pickle", "hashlib", "cudf", "cupy", "dask", "distributed", "Image", "ast",
    "pyarrow", "polars", "numpy", "pandas", "kvikio", "rmm", "time", "threading", "subprocess",
    "RegexProgram", "Client", "Scheduler", "pytest", "signal", "self", "random", "torch", "pathlib",
    "file", "cvcuda", "nvimgcodec", "pylibcudf",
}
# Call-like words of other libraries or of pipeline files, cited without a module prefix.
FOREIGN_CALLS = {
    "extract_regex", "match_substring", "utf8_rtrim", "combine_chunks", "write_table",
    "count_distinct", "is_finite", "posix_fadvise", "fromarray", "frombuffer", "tobytes",
    "getexif", "draft", "strptime", "from_map", "map_partitions", "shuffle", "to_parquet",
    "read_text", "hash", "sum", "any", "collect", "scan_ndjson", "read_json", "read_ndjson",
    "dumps", "loads", "set", "len", "isdir", "realpath", "relpath", "scandir", "stat",
    "if_else", "list_element", "drop_duplicates", "unique", "extract_groups", "sink_parquet",
    "scan_lines", "str", "take", "Pool", "catch_warnings", "main", "fsync", "rmtree", "bind",
    "signature", "create", "lower", "upper", "now", "today", "freeze", "exit", "disable",
    "read_parquet", "to_pylibcudf", "get_worker_info", "DataLoader", "SeedSequence", *dir(builtins),
}


def sources() -> list[Path]:
    return sorted(p for d in SEARCHED for p in (ROOT / d).rglob("*.py") if "__pycache__" not in p.parts)


def docs() -> list[str]:
    pages = sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))
    return ["README.md", "benchmarks/README.md", *pages]


DEFINED = re.compile(
    r"^\s*(?:(?:async\s+)?def\s+(\w+)|class\s+(\w+)|(?:self\.)?(\w+)\s*(?::[^=\n]*)?=(?!=))", re.M
)
IMPORTED = re.compile(r"^\s*(?:from\s+\S+\s+)?import\s+\(?([\w\s,.]+)\)?", re.M)


@cache
def definitions(path: Path) -> frozenset[str]:
    """Every name a file defines or imports: functions, classes, methods, assignments (at any
    depth, attributes of `self` included) and the names it imports."""
    text = path.read_text(encoding="utf-8")
    names = {n for groups in DEFINED.findall(text) for n in groups if n}
    for imported in IMPORTED.findall(text):
        for item in imported.split(","):
            words = item.split()
            if words:
                names.add(words[-1].split(".")[0])
    # a package's lazily imported names (a module `__getattr__`) are the ones its __all__ lists
    for listed in re.findall(r"^__all__\s*=\s*\[([^\]]*)\]", text, re.M):
        names.update(re.findall(r"[\"']([A-Za-z_]\w*)[\"']", listed))
    return frozenset(names)


@cache
def all_definitions() -> frozenset[str]:
    return frozenset().union(*(definitions(p) for p in sources()))


@cache
def all_functions() -> frozenset[str]:
    """Names of the functions and classes of the tree (not of its variables)."""
    names = set()
    for path in sources():
        text = path.read_text(encoding="utf-8")
        names |= set(re.findall(r"^\s*(?:async\s+)?(?:def|class)\s+(\w+)", text, re.M))
    return frozenset(names)


@cache
def repo_files() -> tuple[str, ...]:
    """Every file and folder of the repository (folders end in `/`), git's and caches aside."""
    out = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIPPED and not d.startswith(".")]
        rel = Path(folder).relative_to(ROOT).as_posix()
        prefix = "" if rel == "." else rel + "/"
        out += [prefix + d + "/" for d in dirs] + [prefix + f for f in files]
    return tuple(out)


def resolve_path(cited: str) -> list[str]:
    """Repository paths a cited path may mean: itself, or under any folder (`commit.py` ->
    gpuetl/sinks/commit.py). A `*` in the citation is a glob over one name."""
    pattern = re.escape(cited).replace(r"\*", r"[^/]*")
    rx = re.compile(rf"(^|/){pattern}$")
    return [f for f in repo_files() if rx.search(f)]


def module_files(dotted: str) -> list[Path]:
    """Files a dotted module citation may mean (`backends.base`, `gpu_regex`, `gpuetl.cli`)."""
    parts = dotted.split(".")
    if parts[0] == "gpuetl":
        parts = parts[1:]
    if not parts:
        return [ROOT / "gpuetl" / "__init__.py"]
    tail = "/".join(parts)
    found = [ROOT / f for f in resolve_path(tail + ".py")]
    found += [ROOT / f / "__init__.py" for f in resolve_path(tail + "/")]
    found = [f for f in found if f.exists()]
    return [f for f in found if f.parts[len(ROOT.parts)] in SEARCHED]


def code_spans(text: str) -> list[str]:
    text = re.sub(r"``(.+?)``", lambda m: "`" + m.group(1).replace("`", "'") + "`", text)
    spans = re.findall(r"`([^`\n]+)`", text)
    # indented blocks (the module map) are code too
    spans += [line.strip() for line in text.splitlines() if line.startswith("    ")]
    return spans


PATH = re.compile(r"(?<![\w./<*-])((?:[\w*]+/)*[\w*]+\.py)\b")
# `path.py: name` in one code span, or `path.py`: `name`, `name` and `name`
SPAN_PATH_NAME = re.compile(r"^((?:\w+/)*\w+\.py):\s*([\w.]+(?:\(\))?(?:,\s*[\w.]+(?:\(\))?)*)$")
TEXT_PATH_NAME = re.compile(r"`((?:\w+/)*\w+\.py)`:\s*((?:`[\w.]+(?:\(\))?`(?:,\s*|,?\s+and\s+)?)+)")
CALL = re.compile(r"(?<![\w.])((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)\(")
DOTTED = re.compile(r"^((?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*)(?:\(\))?$")
# a line of the module map (`    runtime/   executor ...`) or a span of two folders or more
FOLDER = re.compile(r"^([a-z][a-z_]*(?:/[a-z][a-z_]*)*)/(?:\s|$)")
FILE_SUFFIXES = (".py", ".json", ".md", ".yaml", ".cu", ".js", ".parquet", ".jpg", ".JPG", ".ndjson")
# dotted names that are not Python: the plugins' entry-point group, a Parquet metadata key
NOT_PYTHON = {"gpuetl.plugins", "gpuetl.placement_group_starts"}


@cache
def known_calls() -> frozenset[str]:
    """Functions of the expression language (docs cite `round()`, `substr()`): the names the docs
    generator lists for steps.md."""
    from gpuetl.docs import steps_markdown

    return frozenset(re.findall(r"`(\w+)\(", steps_markdown()))


def problems(doc: Path) -> list[str]:
    text = doc.read_text(encoding="utf-8")
    found: list[str] = []
    spans = code_spans(text)
    # 1. every path.py, in code or in prose
    for cited in sorted(set(PATH.findall(text))):
        if not resolve_path(cited):
            found.append(f"no file {cited}")
    # 2. `path.py: name, name` -- the names are that file's
    pairs = [m.groups() for span in spans if (m := SPAN_PATH_NAME.match(span))]
    pairs += TEXT_PATH_NAME.findall(text)
    for path, names in pairs:
        files = [ROOT / f for f in resolve_path(path)]
        for name in re.findall(r"[\w.]+", names):
            if name == "and":
                continue
            last = name.split(".")[-1]
            if files and not any(last in definitions(f) for f in files):
                found.append(f"{path} defines no {name}")
    # 3. folders: the module map's lines, and spans of two folders or more (`sources/formats/`)
    indented = {line.strip() for line in text.splitlines() if line.startswith("    ")}
    for span in spans:
        m = FOLDER.match(span)
        if not m or m.group(1).startswith("_") or (span not in indented and "/" not in m.group(1)):
            continue
        if not resolve_path(m.group(1) + "/") and not ignored(m.group(1)):
            found.append(f"no folder {m.group(1)}/")
    # 4. dotted names in code: module.name, or Class.attribute for a class of the tree
    for span in spans:
        m = DOTTED.match(span.strip())
        if not m or span.strip().endswith(FILE_SUFFIXES) or m.group(1) in NOT_PYTHON:
            continue
        dotted = m.group(1)
        if dotted.split(".")[0] in FOREIGN:
            continue
        module, last = dotted.rsplit(".", 1)
        files = module_files(module)
        if files:
            if not any(last in definitions(f) for f in files):
                found.append(f"{module} defines no {last}")
        elif module.split(".")[-1][:1].isupper() and module.split(".")[-1] in all_definitions():
            if last not in all_definitions():
                found.append(f"nothing defines {dotted}")
    # 5. every name() called in code, and every name() in prose
    calls = {c for span in spans if not span.endswith("(") for c in CALL.findall(span)}
    own = set(re.findall(r"^\s*(?:def|class)\s+(\w+)", text, re.M))  # the doc's own examples
    calls |= set(re.findall(r"(?<![\w.`])((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)\(\)", text))
    for call in sorted(calls):
        parts = call.split(".")
        if parts[0] in FOREIGN or {parts[-1]} & (FOREIGN_CALLS | known_calls() | own):
            continue
        if parts[-1] not in all_definitions():
            found.append(f"nothing defines {call}()")
    # 6. the module map: in a line `folder/   name (what it does), name: ...` every name
    #    followed by `(` or `:` outside parentheses is a module or package of that folder
    folder = None
    for line in text.splitlines():
        if not line.startswith("    "):
            folder = None
            continue
        head = re.match(r"^    ([a-z_]+)/\s{2,}(.*)$", line)
        if head:
            folder, rest = head.groups()
        elif folder and re.match(r"^\s{6,}\S", line):
            rest = line
        else:
            folder = None
            continue
        for name in map_names(rest):
            package = ROOT / "gpuetl" / folder
            if not (package / f"{name}.py").exists() and not (package / name).is_dir():
                found.append(f"the module map names {folder}/{name}, which does not exist")
    # 7. a private name (`_cut`) belongs to the module the paragraph last cited
    for paragraph in re.split(r"\n\s*\n", text):
        if paragraph.lstrip().startswith("|"):  # a table: its rows are not one context
            continue
        last_file = None
        for span in code_spans(paragraph):
            cited = PATH.search(span)
            if cited and resolve_path(cited.group(1)):
                last_file = [ROOT / f for f in resolve_path(cited.group(1))]
            elif re.fullmatch(r"_[a-z]\w*", span) and span in all_functions():
                if last_file and not any(span in definitions(f) for f in last_file):
                    found.append(f"{span} is not in {cited_name(last_file)}")
    return found


def ignored(folder: str) -> bool:
    """A folder git ignores (where gpuetl writes examples' and benchmarks' data), or one in it."""
    lines = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    prefixes = [line.strip().strip("/") for line in lines if line.strip() and not line.startswith("#")]
    return any(folder == p or folder.startswith(p + "/") for p in prefixes)


def cited_name(files: list[Path]) -> str:
    return ", ".join(f.relative_to(ROOT).as_posix() for f in files)


def map_names(line: str) -> list[str]:
    """Names a module-map line gives as modules: a word right before `(` or `:`, outside
    parentheses."""
    names, depth, out = [], 0, []
    for ch in line:
        if ch == "(":
            if depth == 0:
                names.append("".join(out))
            depth += 1
        elif ch == ")":
            depth -= 1
            out = []
        elif depth == 0:
            if ch == ":":
                names.append("".join(out))
            out.append(ch)
    words = []
    for text in names:
        m = re.search(r"(?:^|[;,])\s*([a-z_]+)\s*$", text)
        if m:
            words.append(m.group(1))
    return words


def test_a_missing_module_or_function_is_found(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "The journal (`sinks/commit.py: _NoSuchTree`) and `runtime/nowhere.py`,\n"
        "`backends.base.NoSuchBackend`, `frobnicate_the_shards()`; `sinks/commit.py` is real.\n",
        encoding="utf-8",
    )
    assert problems(doc) == [
        "no file runtime/nowhere.py",
        "sinks/commit.py defines no _NoSuchTree",
        "backends.base defines no NoSuchBackend",
        "nothing defines frobnicate_the_shards()",
    ]


def test_a_stale_module_map_and_a_private_name_in_the_wrong_module_are_found(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "    plan/      compile: spec → Plan; stages: what runs inside one partition\n"
        "    sources/   registry (formats by name), inputs (globs → files)\n\n"
        "A step marks its dropped rows (`runtime/partition.py: _mark_dropped`), and `_cut` copies\n"
        "the live ones out.\n",
        encoding="utf-8",
    )
    assert problems(doc) == [
        "the module map names plan/stages, which does not exist",
        "the module map names sources/inputs, which does not exist",
        "_cut is not in gpuetl/runtime/partition.py",
    ]


@pytest.mark.parametrize("name", docs())
def test_the_docs_name_only_what_exists(name):
    assert problems(ROOT / name) == []


def test_the_benchmarks_readme_says_how_to_run_every_script_in_400_lines():
    text = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    scripts = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))
    assert "gpu_check.py" in scripts and "side_by_side.py" in scripts
    assert [name for name in scripts if f"`{name}`" not in text] == []
    runnable = [name for name in scripts if name != "side_by_side.py"]
    assert [name for name in runnable if f"benchmarks/{name}" not in text] == []  # a command line
    assert len(text.splitlines()) <= 400


@pytest.mark.parametrize("path", docs())
def test_no_doc_points_outside_the_repository_or_tells_its_history(path):
    text = (ROOT / path).read_text(encoding="utf-8")
    outside = r"\.\./shared|/work/"
    history = r"\bthis session\b|\b(?:first|second|third|\w+th) session\b|\b(?:fourth|fifth|\w+th) pass\b"
    assert re.findall(f"{outside}|{history}", text, re.I) == []


def test_gpu_md_names_every_test_file_that_checks_the_gpu_code_and_where_it_runs():
    """docs/gpu.md's "What has run where" lists each file of GPU tests under the tier it runs in:
    a device (`gpu`), the RAPIDS libraries on a CPU (`gpu_api`), or every commit."""
    text = (ROOT / "docs" / "gpu.md").read_text(encoding="utf-8")
    section = text.split("## What has run where", 1)[1].split("\n## ", 1)[0]
    tiers = re.split(r"\n- \*\*", section)[1:]
    assert [t.split("**", 1)[0] for t in tiers] == [
        "On a GPU: nothing.",
        "Against the real RAPIDS libraries, on a CPU",
        "On every commit, without RAPIDS:",
    ]
    for path in sorted((ROOT / "tests" / "backends").glob("test_gpu*.py")):
        source = path.read_text(encoding="utf-8")
        on_device, on_rapids = "pytestmark = pytest.mark.gpu\n" in source, "pytest.mark.gpu_api" in source
        tier = 0 if on_device else 1 if on_rapids else 2
        assert re.search(rf"`(?:[\w/]+/)?{re.escape(path.name)}`", tiers[tier]), (path.name, tier)
