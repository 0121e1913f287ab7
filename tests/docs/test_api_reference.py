"""The API reference covers lbtrain.optim: one entry in docs/api.md per name of its ``__all__`` (and
none for any other name), a docstring for each that names every argument, says what it returns and
shows an example, a doc comment for each constant, and the examples run as doctests.

The checks are plain functions returning the problems they find, so that each is also shown to find
a problem it is given (a reference with an entry missing, a docstring without an argument).
"""

import doctest
import importlib
import inspect
import pathlib
import pkgutil
import re

import pytest

from experiments import ROOT
from lbtrain import optim

API_PAGE = pathlib.Path(ROOT) / "docs" / "api.md"
ENTRY = re.compile(r"^\.\. auto(function|class|data):: (\S+)", re.MULTILINE)
MODULES = [optim.__name__] + [
    info.name for info in pkgutil.iter_modules(optim.__path__, optim.__name__ + ".")
]


def entries(page: str) -> list[str]:
    """The names the page documents, in its order (relative to its ``currentmodule``)."""
    assert ".. currentmodule:: lbtrain.optim" in page
    return [name.removeprefix("lbtrain.optim.") for _, name in ENTRY.findall(page)]


def coverage_problems(page: str, public: list[str]) -> list[str]:
    listed = entries(page)
    problems = [f"{name}: no entry in docs/api.md" for name in public if name not in listed]
    problems += [f"{name}: an entry, but not in __all__" for name in listed if name not in public]
    problems += [f"{name}: more than one entry" for name in set(listed) if listed.count(name) > 1]
    return problems


def sections(doc: str) -> dict[str, list[str]]:
    """A Google-style docstring's sections (``Args:``, ``Returns:``, ...) and their lines."""
    found, current = {}, None
    for line in doc.splitlines():
        header = re.fullmatch(r"([A-Z][a-z]+):", line.strip())
        if header and not line.startswith(" "):
            current = found.setdefault(header.group(1), [])
        elif current is not None and (line.startswith(" ") or not line.strip()):
            current.append(line)
        else:
            current = None
    return found


def documented_arguments(lines: list[str]) -> list[str]:
    """The names an ``Args:`` (or ``Attributes:``) section describes, at its first indent."""
    indents = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    first = min(indents, default=0)
    names = []
    for line in lines:
        match = re.match(rf"^ {{{first}}}(\*{{0,2}}\w+)(?: \([^)]*\))?:", line)
        if match:
            names.append(match.group(1))
    return names


def signature_arguments(obj) -> list[str]:
    if isinstance(obj, type) and issubclass(obj, tuple) and hasattr(obj, "_fields"):
        return list(obj._fields)  # a NamedTuple: its fields
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return [
        stars.get(p.kind, "") + name
        for name, p in inspect.signature(obj).parameters.items()
        if name != "self"
    ]


def docstring_problems(name: str, obj) -> list[str]:
    doc = inspect.getdoc(obj) or ""
    if not doc.strip():
        return [f"{name}: no docstring"]
    found = sections(doc)
    problems = []
    is_namedtuple = isinstance(obj, type) and hasattr(obj, "_fields")
    arg_section = "Attributes" if is_namedtuple else "Args"
    wanted = signature_arguments(obj)
    described = documented_arguments(found.get(arg_section, []))
    if wanted and arg_section not in found:
        problems.append(f"{name}: no {arg_section}: section")
    for arg in wanted:
        if arg not in described:
            problems.append(f"{name}: argument {arg} is not described")
    for arg in described:
        if arg not in wanted:
            problems.append(f"{name}: describes {arg}, which it does not take")
    if not isinstance(obj, type) and "Returns" not in found:
        problems.append(f"{name}: no Returns: section")
    if ">>> " not in doc:
        problems.append(f"{name}: no example")
    return problems


def constant_doc(name: str) -> list[str]:
    """The ``#:`` doc comment above the module-level assignment of ``name`` (what autodoc shows),
    in the first module of lbtrain.optim that assigns it."""
    for module in MODULES:
        lines = inspect.getsource(importlib.import_module(module)).splitlines()
        for number, line in enumerate(lines):
            if re.match(rf"{name}(: [^=]+)? = ", line):
                above = []
                while number > 0 and lines[number - 1].startswith("#:"):
                    number -= 1
                    above.insert(0, lines[number].removeprefix("#:").strip())
                return above
    return []


def is_constant(obj) -> bool:
    return not (inspect.isfunction(obj) or inspect.isclass(obj))


def test_the_package_exports_its_all_and_nothing_else():
    public = {
        n for n, v in vars(optim).items() if not n.startswith("_") and not inspect.ismodule(v)
    }
    assert public == set(optim.__all__)
    assert len(optim.__all__) == len(set(optim.__all__))


def test_every_public_name_has_one_entry_in_the_reference():
    assert coverage_problems(API_PAGE.read_text(), optim.__all__) == []


def test_the_coverage_check_finds_a_missing_and_an_unknown_entry():
    page = API_PAGE.read_text()
    assert ".. autofunction:: lars\n" in page
    doctored = page.replace(".. autofunction:: lars\n", ".. autofunction:: not_exported\n")
    assert coverage_problems(doctored, optim.__all__) == [
        "lars: no entry in docs/api.md",
        "not_exported: an entry, but not in __all__",
    ]


@pytest.mark.parametrize("name", [n for n in optim.__all__ if not is_constant(getattr(optim, n))])
def test_every_public_function_and_class_documents_its_arguments(name):
    assert docstring_problems(name, getattr(optim, name)) == []


@pytest.mark.parametrize("name", [n for n in optim.__all__ if is_constant(getattr(optim, n))])
def test_every_public_constant_has_a_doc_comment(name):
    doc = " ".join(constant_doc(name)).strip()
    assert len(doc) > 40, f"{name}: no '#:' comment above its assignment"


def test_the_docstring_check_finds_what_is_missing():
    def scaled(x, factor=2.0, *rest, **options):
        """Multiply.

        Args:
            x: the value.
            scale: not an argument.

        Example:
            >>> scaled(1)
        """

    assert docstring_problems("scaled", scaled) == [
        "scaled: argument factor is not described",
        "scaled: argument *rest is not described",
        "scaled: argument **options is not described",
        "scaled: describes scale, which it does not take",
        "scaled: no Returns: section",
    ]
    assert docstring_problems("bare", lambda: None) == ["bare: no docstring"]
    # a constant whose comment is a plain "#" one (scaling.MAX_DENOMINATOR) has no doc comment
    assert constant_doc("MAX_DENOMINATOR") == [] and constant_doc("LR_RULES")


def test_the_docstring_examples_run():
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=flags)
    examples, report = {}, []
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for test in finder.find(module, module_name):
            if test.examples:
                runner.run(test, out=report.append)
                examples[test.name] = len(test.examples)
    failed, attempted = runner.summarize(verbose=False)
    assert failed == 0, f"{failed} of {attempted} examples failed:\n" + "".join(report)[:4000]
    # each public function and class has its own examples among them
    for name in optim.__all__:
        obj = getattr(optim, name)
        if not is_constant(obj):
            assert f"{obj.__module__}.{obj.__qualname__}" in examples, name
