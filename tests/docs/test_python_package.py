"""The metaload package stays a package a newcomer can find their way in (client/python/README.md):

- no folder of it holds more than 16 files, and no .py file more than 420 lines (style.md habit 6);
- its modules import one another without a cycle, counting every import: at the top, inside a
  function, and under TYPE_CHECKING (a cycle there is still two modules that need each other);
- nothing in _core/ imports _integrations/ (the integrations are built on the core);
- client/python/CMakeLists.txt lists every file of it (the build, the wheel and pip copy those).

Read from the source tree with ast: nothing is imported or built.
"""
import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "client" / "python" / "metaload"
MAX_FILES_PER_FOLDER = 16
MAX_LINES_PER_FILE = 420


def package_folders(package):
    return [package, *sorted(p for p in package.rglob("*") if p.is_dir() and p.name != "__pycache__")]


def module_name(package, path):
    parts = [package.name, *path.relative_to(package).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package):
    """{module: {modules of the package it imports}}, every import statement counted. An import
    of a name from a package counts as an import of that submodule when one exists by that name
    (`from .. import _native`), else of the package itself."""
    files = {module_name(package, p): p for p in package.rglob("*.py") if "__pycache__" not in p.parts}
    # Extension modules (a .pyi beside a compiled one) are modules too, with no imports of their own.
    known = set(files) | {module_name(package, p) for p in package.rglob("*.pyi")}
    graph = {}
    for name, path in files.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name.split(".")[0] == package.name}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[:len(here.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                elif node.module and node.module.split(".")[0] == package.name:
                    target = node.module
                else:
                    continue
                for alias in node.names:
                    edges.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in known else target)
        graph[name] = {e for e in edges if e in known and e != name}
    return graph


def find_cycle(graph):
    """One import cycle as [a, b, ..., a], or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_folder_holds_more_than_16_files():
    crowded = {}
    for folder in package_folders(PACKAGE):
        files = [p.name for p in folder.iterdir() if p.is_file() and not p.name.endswith(".so")]
        if len(files) > MAX_FILES_PER_FOLDER:
            crowded[str(folder.relative_to(ROOT))] = len(files)
    assert len(package_folders(PACKAGE)) >= 3, "the package has lost its _core/ and _integrations/ folders"
    assert not crowded, f"folders over {MAX_FILES_PER_FOLDER} files (split them by concern): {crowded}"


def test_no_file_is_over_420_lines():
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES_PER_FILE}
    assert not long, f"files over {MAX_LINES_PER_FILE} lines (two concepts: split them): {long}"


def test_the_package_imports_without_a_cycle():
    graph = import_graph(PACKAGE)
    # The graph is the real one: the entry imports the core, the core its own modules.
    assert "metaload._core.materialize" in graph["metaload"], graph["metaload"]
    assert "metaload._core.entries" in graph["metaload._core.strict"], graph["metaload._core.strict"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_core_does_not_import_the_integrations():
    graph = import_graph(PACKAGE)
    upward = {m: sorted(e for e in edges if e.startswith("metaload._integrations"))
              for m, edges in graph.items() if m.startswith("metaload._core")}
    assert not {m: e for m, e in upward.items() if e}, upward


def test_cmake_copies_every_file_of_the_package():
    cmake = (PACKAGE.parent / "CMakeLists.txt").read_text()
    top = re.search(r"^set\(_py_sources ([^)]*)\)", cmake, re.M)
    assert top, "no set(_py_sources ...) in client/python/CMakeLists.txt"
    listed = set(top.group(1).split())
    for names, folder in re.findall(r"foreach\(f ([^)]*)\)\s*list\(APPEND _py_sources (\w+)/\$\{f\}\)", cmake):
        listed |= {f"{folder}/{name}" for name in names.split()}
    present = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*")
               if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(".so")}
    assert listed == present, f"not in CMake: {sorted(present - listed)}; not in the package: {sorted(listed - present)}"


def test_a_cycle_through_type_checking_is_found(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from .sub.a import A\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text("from .. import sub\nfrom .b import B\nA = 1\n")
    (package / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.a import A\nB = 2\n")
    assert find_cycle(import_graph(package)) == ["pkg.sub.a", "pkg.sub.b", "pkg.sub.a"]
    (package / "sub" / "b.py").write_text("B = 2\n")
    assert find_cycle(import_graph(package)) is None
