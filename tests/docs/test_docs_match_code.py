"""The docs say what the code is: checked against the source tree, without building anything.

- docs/architecture.md's thread table lists every work queue and thread metad starts, and every
  class, lock and file it names exists;
- every README's and doc's backticked file or folder paths exist;
- nothing in the repository points outside it (a folder beside the checkout, notes kept there).
"""
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def tracked_files():
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return [ROOT / line for line in out.splitlines() if (ROOT / line).is_file()]


def thread_table():
    """The rows of the architecture page's thread table: (name, the whole row)."""
    rows, inside = [], False
    for line in ARCHITECTURE.read_text().splitlines():
        if line.startswith("| thread | how many |"):
            inside = True
            continue
        if inside and not line.startswith("|"):
            break
        if inside and not line.startswith("|---"):
            name = re.match(r"\| \*\*([^*]+)\*\*", line)
            assert name, f"a row without a bold name: {line}"
            rows.append((name.group(1), line))
    assert rows, "docs/architecture.md has no thread table"
    return rows


def daemon_sources():
    return sorted(p for p in (ROOT / "daemon").rglob("*") if p.suffix in (".h", ".cc"))


def test_every_work_queue_metad_makes_is_a_row():
    # WorkQueue members are constructed as name_("queue", threads, max_queued).
    queues = set()
    for source in daemon_sources():
        members = re.findall(r"^\s*WorkQueue (\w+);", source.read_text(), re.M)
        for member in members:
            for other in daemon_sources():
                queues.update(re.findall(rf"\b{member}\(\"(\w+)\",", other.read_text()))
    assert queues >= {"planning", "io", "registration", "digests"}, queues
    rows = {name for name, row in thread_table() if row.startswith(f"| **{name}** queue |")}
    assert queues - rows == set(), f"queues without a row: {queues - rows}"


def test_every_thread_metad_starts_is_a_row_naming_its_file():
    # Each std::thread member, or std::thread(...) started in place, outside the work queues.
    starts = {}
    for source in daemon_sources():
        if source.parent.name == "exec" and source.stem == "work_queue":
            continue
        text = source.read_text()
        count = len(re.findall(r"^\s*std::thread \w+;", text, re.M)) + len(re.findall(r"(?<!= )std::thread\(\[", text))
        if count:
            stem = source.with_suffix("").relative_to(ROOT).as_posix()
            starts[stem] = starts.get(stem, 0) + count
    assert len(starts) >= 5, starts
    rows = thread_table()
    for stem, count in starts.items():
        citing = [name for name, row in rows if re.search(rf"`{re.escape(stem)}\.(h|cc)`", row)]
        assert len(citing) >= count, f"{stem} starts {count} thread(s); rows naming it: {citing}"


def test_every_class_and_lock_the_table_names_exists():
    headers = {p: p.read_text() for p in daemon_sources() if p.suffix == ".h"}
    for name, row in thread_table():
        for cls, member in re.findall(r"`(\w+)::(\w+)`", row):
            owners = [p for p, text in headers.items() if re.search(rf"\b(class|struct) {cls}\b", text)]
            assert owners, f"row {name}: no class {cls} in daemon/"
            assert any(re.search(rf"\b{member}\b", headers[p]) for p in owners), f"row {name}: {cls} has no {member}"
        for path in re.findall(r"`((?:daemon|util|proto|client|planner|security)/[\w/.]+)`", row):
            assert (ROOT / path).exists(), f"row {name}: {path} does not exist"


PATH_IN_BACKTICKS = re.compile(r"`((?:[\w.-]+/)+[\w.-]*)`")
TOP_FOLDERS = ("bench", "client", "cmake", "daemon", "deploy", "docs", "examples", "fuzz", "include", "libtorch",
               "planner", "proto", "scripts", "security", "tests", "util")


@pytest.mark.parametrize("doc", sorted(
    str(p.relative_to(ROOT)) for p in [*ROOT.glob("*.md"), *ROOT.glob("docs/*.md"), *ROOT.glob("*/**/README.md")]
    if not any(part.startswith(".") or part.startswith("build") for part in p.relative_to(ROOT).parts)))
def test_paths_a_doc_names_exist(doc):
    path = ROOT / doc
    missing = []
    for found in PATH_IN_BACKTICKS.findall(path.read_text()):
        if not found.startswith(TOP_FOLDERS) or "*" in found or "<" in found:
            continue  # a path of a user's machine, a site-packages path, a pattern
        if not (ROOT / found).exists() and not (path.parent / found).exists():
            missing.append(found)
    assert not missing, f"{doc} names paths that do not exist: {missing}"


def test_nothing_points_outside_the_repository():
    outside = re.compile(r"\.\./shared\b|\b(DESIGN|STYLE|BUILD-NOTES)\.md\b")
    offenders = []
    for path in tracked_files():
        if path.suffix in (".safetensors", ".whl") or "fixtures" in path.parts:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if outside.search(line) and path != pathlib.Path(__file__):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not offenders, "\n".join(offenders)
