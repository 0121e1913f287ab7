"""The layers docs/architecture.md draws, checked against the code's imports (read with ``ast``:
every ``import`` and ``from ... import`` statement, inside functions too):

- the top folders import only downwards: ``lbtrain`` < ``configs`` < ``experiments`` < ``scripts``;
- inside ``experiments``, the backend clients (``experiments/backends/``) import nothing of the
  experiments but the package's face (``experiments.ROOT``);
- no two folders import each other, directly or round a longer circle (a package's ``__init__.py``
  naming its own subfolders is its face, not an arrow back up);
- no ``sys.path`` edit outside the scripts' entry points (a ``scripts/`` file outside any package).

Each check is a plain function returning the problems it finds in a tree, so that each is also shown
to find a problem in a small tree made to have it.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re

import pytest

from experiments import ROOT

TOP = ("lbtrain", "configs", "experiments", "scripts")  # lowest first
SKIP = ("experiments/results",)
MUTATORS = {"insert", "append", "extend", "remove", "pop", "clear"}


@dataclasses.dataclass(frozen=True)
class Module:
    path: str  # relative to the root, with /
    name: str  # its dotted name as its importers spell it
    package: str  # the package a relative import starts from
    home: str  # the folder on sys.path its name starts from ("" for the repository)

    @property
    def folder(self) -> str:
        return self.path.rpartition("/")[0]

    @property
    def top(self) -> str:
        return self.path.split("/")[0]


def _dotted(root: pathlib.Path, path: pathlib.Path) -> tuple[str, str]:
    """A module's home and name: from the repository root, but for a file of scripts/ from the
    nearest folder above it that is no package (a script runs with its folder on ``sys.path``)."""
    folder = root
    if path.relative_to(root).parts[0] == "scripts":
        folder = path.parent
        while (folder / "__init__.py").exists():
            folder = folder.parent
    parts = list(path.relative_to(folder).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    home = "" if folder == root else folder.relative_to(root).as_posix()
    return home, ".".join(parts)


def modules(root: pathlib.Path) -> dict[str, Module]:
    found = {}
    for top in TOP:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(SKIP) or "/." in rel:
                continue
            home, name = _dotted(root, path)
            package = name if path.name == "__init__.py" else name.rpartition(".")[0]
            found[rel] = Module(rel, name, package, home)
    return found


def _imported(module: Module, tree: ast.AST) -> list:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from package import module` uses the module; `from module import name` the module
            names.append([base] + [f"{base}.{alias.name}" for alias in node.names])
    return names


def arrows(root: pathlib.Path) -> list[tuple[Module, Module]]:
    """(importer, imported) for every import of one of the tree's own modules. A script's names
    resolve from its own folder first (two script folders may each have a ``checkout``)."""
    table = modules(root)
    by_name = {(m.home, m.name): m for m in table.values()}
    out = []
    for m in table.values():
        tree = ast.parse((root / m.path).read_text(), m.path)
        seen = set()
        for names in _imported(m, tree):
            for target in _resolve(by_name, m.home, names):
                if target.path != m.path and target.path not in seen:
                    seen.add(target.path)
                    out.append((m, target))
    return out


def _resolve(by_name, home: str, names) -> list[Module]:
    """The tree's modules an import statement's names are (a ``from X import a, b`` is a list: the
    modules ``X.a``, ``X.b`` where they are modules, else ``X``)."""

    def find(name):
        # the importer's own folder first, then the repository's names; then a script folder's,
        # which only a sys.path edit can reach
        for key in [(home, name), ("", name)] + sorted(k for k in by_name if k[1] == name):
            if key in by_name:
                return by_name[key]
        return None

    if isinstance(names, str):
        return [m for m in [find(names)] if m]
    base, members = names[0], names[1:]
    found = [m for m in map(find, members) if m]
    if len(found) < len(members) and find(base):
        found.append(find(base))
    return found


def upward_problems(root: pathlib.Path) -> list[str]:
    problems = []
    for src, dst in arrows(root):
        if TOP.index(dst.top) > TOP.index(src.top):
            problems.append(f"{src.path} imports {dst.path}: {src.top}/ is below {dst.top}/")
        backends = "experiments/backends/"
        if (
            src.path.startswith(backends)
            and dst.top == "experiments"
            and not (dst.path.startswith(backends) or dst.path == "experiments/__init__.py")
        ):
            problems.append(
                f"{src.path} imports {dst.path}: a backend client imports no experiment"
            )
    return problems


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The sets of more than one node that reach each other (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str):
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _rooms(src: str, dst: str) -> tuple[str, str] | None:
    """The two folders an arrow between ``src`` and ``dst`` joins, seen from their nearest common
    folder: its child holding each (None when one folder holds the other: that is a package's own
    layering, which the modules' circles check)."""
    a, b = src.split("/"), dst.split("/")
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    if common in (len(a), len(b)):
        return None
    return "/".join(a[: common + 1]), "/".join(b[: common + 1])


def circle_problems(root: pathlib.Path) -> list[str]:
    """Folders that import each other, directly or round a longer circle, and modules that do."""
    folders: dict[str, set[str]] = {}
    files: dict[str, set[str]] = {}
    for src, dst in arrows(root):
        files.setdefault(src.path, set()).add(dst.path)
        rooms = _rooms(src.folder, dst.folder)
        if rooms:
            folders.setdefault(rooms[0], set()).add(rooms[1])
    return [
        f"these folders import each other: {', '.join(c)}" for c in strongly_connected(folders)
    ] + [f"these modules import each other: {', '.join(c)}" for c in strongly_connected(files)]


def _is_sys_path(node: ast.AST) -> bool:
    if isinstance(node, ast.Subscript):
        node = node.value
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def path_edit_problems(root: pathlib.Path) -> list[str]:
    problems = []
    for m in modules(root).values():
        path = root / m.path
        if m.top == "scripts" and not (path.parent / "__init__.py").exists():
            continue  # a script's entry point
        for node in ast.walk(ast.parse(path.read_text(), m.path)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                edits = _is_sys_path(node.func.value) and node.func.attr in MUTATORS
            elif isinstance(node, ast.Assign):
                edits = any(_is_sys_path(t) for t in node.targets)
            elif isinstance(node, ast.AugAssign):
                edits = _is_sys_path(node.target)
            else:
                edits = False
            if edits:
                problems.append(
                    f"{m.path}:{node.lineno} edits sys.path (not a script's entry point)"
                )
    return problems


# --- the checks on this repository ---------------------------------------------------------------


def test_top_folders_import_only_downwards():
    assert upward_problems(pathlib.Path(ROOT)) == []


def test_no_two_folders_import_each_other():
    assert circle_problems(pathlib.Path(ROOT)) == []


def test_sys_path_is_edited_only_by_the_scripts_entry_points():
    assert path_edit_problems(pathlib.Path(ROOT)) == []


LONG = 400  # lines: a module past this is one concern docs/architecture.md names


def long_module_problems(root: pathlib.Path, page: str) -> list[str]:
    """Modules over ``LONG`` lines that the page's table of long modules does not name, and rows of
    that table that name a module that is not over it (or does not exist)."""
    section = page.split("Modules over about 400 lines", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `([^`]+\.py)` \|", section, re.MULTILINE)
    lines = {m.path: len((root / m.path).read_text().splitlines()) for m in modules(root).values()}
    problems = [
        f"{path}: {n} lines, not in docs/architecture.md's table of long modules"
        for path, n in sorted(lines.items())
        if n > LONG and path not in listed
    ]
    problems += [
        f"{path}: in the table of long modules, but {lines.get(path, 'no such module')}"
        + (" lines" if path in lines else "")
        for path in listed
        if lines.get(path, 0) <= LONG
    ]
    return problems


def test_every_long_module_is_named_with_its_one_concern():
    page = (pathlib.Path(ROOT) / "docs" / "architecture.md").read_text()
    assert long_module_problems(pathlib.Path(ROOT), page) == []


# --- each check finds what it is made to find ----------------------------------------------------


def _tree(tmp_path: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for top in TOP:
        (tmp_path / top).mkdir(exist_ok=True)
    return tmp_path


def test_an_upward_import_is_found(tmp_path):
    root = _tree(
        tmp_path,
        {
            "lbtrain/__init__.py": "",
            "lbtrain/core.py": "def f():\n    from experiments import plans\n",
            "experiments/__init__.py": "ROOT = '.'\n",
            "experiments/plans.py": "import lbtrain.core\n",
            "experiments/backends/__init__.py": "",
            "experiments/backends/tpu.py": "from experiments import ROOT, plans\nimport lbtrain\n",
        },
    )
    assert sorted(upward_problems(root)) == [
        "experiments/backends/tpu.py imports experiments/plans.py:"
        " a backend client imports no experiment",
        "lbtrain/core.py imports experiments/plans.py: lbtrain/ is below experiments/",
    ]


def test_a_script_resolves_names_from_its_own_folder(tmp_path):
    root = _tree(
        tmp_path,
        {
            "lbtrain/__init__.py": "",
            "scripts/run.py": "import checkout\nfrom tools import common\n",
            "scripts/checkout.py": "",
            "scripts/tools/__init__.py": "",
            "scripts/tools/common.py": "from . import other\nfrom lbtrain import x\n",
            "scripts/tools/other.py": "",
            "scripts/more/bench.py": "import checkout\n",
            "scripts/more/checkout.py": "import lbtrain\n",
        },
    )
    found = {(a.path, b.path) for a, b in arrows(root)}
    assert found == {
        ("scripts/run.py", "scripts/checkout.py"),
        ("scripts/run.py", "scripts/tools/common.py"),
        ("scripts/tools/common.py", "scripts/tools/other.py"),
        ("scripts/tools/common.py", "lbtrain/__init__.py"),
        ("scripts/more/bench.py", "scripts/more/checkout.py"),
        ("scripts/more/checkout.py", "lbtrain/__init__.py"),
    }
    assert upward_problems(root) == []


def test_two_folders_that_import_each_other_are_found(tmp_path):
    files = {
        "lbtrain/__init__.py": "",
        "lbtrain/data/__init__.py": "from lbtrain.data.images import loader\n",
        "lbtrain/data/base.py": "",
        "lbtrain/data/images/__init__.py": "",
        "lbtrain/data/images/loader.py": "from lbtrain.data import base\n",
        "lbtrain/a/__init__.py": "",
        "lbtrain/a/x.py": "from lbtrain.b import y\n",
        "lbtrain/b/__init__.py": "",
        "lbtrain/b/y.py": "def f():\n    from lbtrain.c import z\n",
        "lbtrain/c/__init__.py": "",
        "lbtrain/c/z.py": "import lbtrain.a.x\n",
    }
    root = _tree(tmp_path, files)
    # the package's face naming its subfolder is no circle; a -> b -> c -> a is one
    assert circle_problems(root) == [
        "these folders import each other: lbtrain/a, lbtrain/b, lbtrain/c",
        "these modules import each other: lbtrain/a/x.py, lbtrain/b/y.py, lbtrain/c/z.py",
    ]


@pytest.mark.parametrize(
    "line",
    [
        "sys.path.insert(0, 'x')",
        "sys.path.append('x')",
        "sys.path[:0] = ['x']",
        "sys.path += ['x']",
    ],
)
def test_a_sys_path_edit_outside_an_entry_point_is_found(tmp_path, line):
    root = _tree(
        tmp_path,
        {
            "scripts/entry.py": f"import sys\n{line}\n",
            "scripts/pkg/__init__.py": "",
            "scripts/pkg/part.py": f"import sys\n{line}\n",
            "experiments/__init__.py": f"import sys\nprint(sys.path)\n{line}\n",
        },
    )
    assert sorted(path_edit_problems(root)) == [
        "experiments/__init__.py:3 edits sys.path (not a script's entry point)",
        "scripts/pkg/part.py:2 edits sys.path (not a script's entry point)",
    ]


def test_a_long_module_missing_from_the_table_is_found(tmp_path):
    root = _tree(
        tmp_path,
        {
            "lbtrain/__init__.py": "",
            "lbtrain/big.py": "x = 1\n" * 401,
            "lbtrain/fits.py": "x = 1\n" * 400,
        },
    )
    page = (
        "# A\n\nModules over about 400 lines:\n\n| module | lines | concern |\n|---|---|---|\n"
        "| `lbtrain/fits.py` | 400 | one |\n| `lbtrain/gone.py` | 500 | one |\n\n## Next\n"
        "| `lbtrain/big.py` | outside the section |\n"
    )
    assert long_module_problems(root, page) == [
        "lbtrain/big.py: 401 lines, not in docs/architecture.md's table of long modules",
        "lbtrain/fits.py: in the table of long modules, but 400 lines",
        "lbtrain/gone.py: in the table of long modules, but no such module",
    ]
