"""The documentation site: every committed results page is a page of it with its plots shown as
images, its navigation lists each page once, and Read the Docs builds it as ``make docs`` does.

The results pages reach the site through docs/_ext/results_pages.py; the quick tests check what it
writes, the slow one builds the whole site (warnings as errors) and reads the HTML.
"""

import glob
import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib

import pytest
import yaml

from experiments import ROOT

DOCS = os.path.join(ROOT, "docs")
RESULTS = os.path.join(ROOT, "experiments", "results")
PYPROJECT = tomllib.loads(open(os.path.join(ROOT, "pyproject.toml")).read())["project"]
TOCTREE = re.compile(r"^```\{toctree\}\n(.*?)^```", re.MULTILINE | re.DOTALL)


def extension():
    spec = importlib.util.spec_from_file_location(
        "results_pages", os.path.join(DOCS, "_ext", "results_pages.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


results_pages = extension()


def committed_pages() -> list[str]:
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(RESULTS, "*.md")))


def linked_plots(text: str) -> list[str]:
    return [t for _, t in results_pages.LINK.findall(text) if t.endswith(".png")]


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


# --- the results pages -------------------------------------------------------------------------


def test_every_results_page_is_written_for_the_site_with_its_plots_as_figures():
    files = results_pages.site_files()
    pages = committed_pages()
    assert "README.md" in pages and len(pages) >= 7
    for page in pages:
        text = read(os.path.join(RESULTS, page))
        site = files[results_pages.site_name(page)].decode()
        plots = linked_plots(text)
        assert page == "README.md" or plots, f"{page} links to no plot"
        for png in plots:
            assert f":::{{figure}} {png}\n" in site, (page, png)
            with open(os.path.join(RESULTS, png), "rb") as f:
                assert files[png] == f.read(), png
    # the entry lists every other page once, in a hidden toctree
    (entry,) = TOCTREE.findall(files["index.md"].decode())
    listed = [line for line in entry.splitlines() if line and not line.startswith(":")]
    assert sorted(listed) == sorted(p.removesuffix(".md") for p in pages if p != "README.md")


def test_every_link_of_a_site_page_reaches_something_the_site_holds():
    files = results_pages.site_files()
    docs_pages = {os.path.basename(p) for p in glob.glob(os.path.join(DOCS, "*.md"))}
    for name, data in files.items():
        if not name.endswith(".md"):
            continue
        for _, target in results_pages.LINK.findall(data.decode()):
            path = target.partition("#")[0]
            if results_pages.EXTERNAL.match(target) or not path:
                continue
            if path.startswith("../"):
                assert path.removeprefix("../") in docs_pages, (name, target)
            else:
                assert path in files, (name, target)


def test_links_the_site_cannot_hold_become_text(tmp_path):
    """A page's links, each kind: another page, the entry, a page of docs/, a plot beside it, a
    run's folder and a plot that is not there."""
    results, docs = tmp_path / "experiments" / "results", tmp_path / "docs"
    results.mkdir(parents=True)
    docs.mkdir()
    (docs / "reproduce.md").write_text("# Protocol\n")
    (results / "curves.png").write_bytes(b"png")
    (results / "README.md").write_text("# Results\n\n[a](a.md) and [b](b.md)\n")
    (results / "b.md").write_text("# B\n\n$1.20 a chip-hour, $3.40 a day\n")
    (results / "a.md").write_text(
        "# A\n\n[index](README.md), [b](b.md#top), [protocol](../../docs/reproduce.md#rules), "
        "[run](a/runs/r0/), [plot](curves.png), [gone](gone.png), [web](https://example.org/x.md)\n"
    )
    files = results_pages.site_files(str(results), str(docs))
    assert sorted(files) == ["a.md", "b.md", "curves.png", "index.md"]
    a = files["a.md"].decode()
    assert (
        "[index](index.md), [b](b.md#top), [protocol](../reproduce.md#rules), "
        f"run (`{os.path.relpath(results / 'a' / 'runs' / 'r0', results_pages.REPO)}`), "
        "[plot](curves.png), gone (`" in a
    )
    assert "[web](https://example.org/x.md)" in a
    assert a.endswith("## Plots\n\n:::{figure} curves.png\n:alt: plot\n\nplot\n:::\n")
    # b links no plot; its dollars stay text (the copies leave dollarmath off)
    assert files["b.md"].decode() == (
        '---\nmyst:\n  enable_extensions: ["colon_fence"]\n---\n'
        "# B\n\n$1.20 a chip-hour, $3.40 a day\n"
    )
    assert files["index.md"].decode().endswith("```{toctree}\n:hidden:\n\na\nb\n```\n")
    # written: exactly these files and the folder's own .gitignore, a stale page removed
    out = tmp_path / "docs" / "results"
    out.mkdir()
    (out / "stale.md").write_text("# Stale\n")
    results_pages.write(files, str(out))
    assert sorted(os.listdir(out)) == [".gitignore", "a.md", "b.md", "curves.png", "index.md"]
    assert (out / ".gitignore").read_text().splitlines()[-1] == "*"


def test_a_docs_page_linking_a_results_page_in_the_repository_links_its_copy_on_the_site():
    text = (
        "[gnmt](../experiments/results/gnmt_local.md#target), "
        "[all](../experiments/results/README.md), [runs](../experiments/results/gnmt_local/runs/)"
    )
    assert results_pages.link_results(text, DOCS) == (
        "[gnmt](results/gnmt_local.md#target), [all](results/index.md), "
        "[runs](../experiments/results/gnmt_local/runs/)"
    )


@pytest.mark.slow
def test_the_built_site_shows_every_results_page_with_its_plots(tmp_path):
    """``make docs``'s build (warnings as errors): each committed results page is a page of the
    site, an <img> for each plot it links to, and the home page leads to the results."""
    out = tmp_path / "html"
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", DOCS, str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    for page in committed_pages():
        html = read(out / "results" / results_pages.site_name(page).replace(".md", ".html"))
        images = re.findall(r'<img [^>]*src="\.\./_images/([^"]+)"', html)
        assert images == linked_plots(read(os.path.join(RESULTS, page))), page
        for image in images:
            assert (out / "_images" / image).stat().st_size > 1000, image
    assert 'href="results/index.html"' in read(out / "index.html")
    # docs/reproduce.md links the pages where they are in the repository; the site, to its copies
    assert 'href="results/mnist_lstm_local.html"' in read(out / "reproduce.html")


# --- the navigation ----------------------------------------------------------------------------


def toctree_problems(index: str, pages: list[str]) -> list[str]:
    """What is wrong with the home page's toctrees: a glob (it lists again what a toctree above
    already has), a page listed twice, a page of ``pages`` not listed."""
    problems, listed = [], []
    for block in TOCTREE.findall(index):
        for line in block.splitlines():
            if line.strip() == ":glob:":
                problems.append("a toctree with :glob:")
            elif line.strip() and not line.startswith(":"):
                listed.append(line.strip())
    twice = sorted(name for name in set(listed) if listed.count(name) > 1)
    problems += [f"{name}: listed {listed.count(name)} times" for name in twice]
    problems += [f"{name}: not listed" for name in pages if name not in listed]
    return problems


def site_docnames() -> list[str]:
    """The docs/ pages (but the home page) and the results entry, as docnames."""
    names = [os.path.basename(p)[:-3] for p in glob.glob(os.path.join(DOCS, "*.md"))]
    return sorted(n for n in names if n != "index") + ["results/index"]


def test_the_navigation_lists_each_page_once():
    assert toctree_problems(read(os.path.join(DOCS, "index.md")), site_docnames()) == []


def test_the_navigation_check_finds_a_glob_a_twice_listed_and_a_missing_page():
    index = read(os.path.join(DOCS, "index.md"))
    doctored = index.replace("\ndevelopment\n", "\ndevelopment\noptim\n*\n").replace(
        ":maxdepth: 1\n\narchitecture", ":maxdepth: 1\n:glob:\n\narchitecture"
    )
    assert toctree_problems(doctored, site_docnames()) == [
        "a toctree with :glob:",
        "optim: listed 2 times",
    ]
    assert toctree_problems(index, site_docnames() + ["extra"]) == ["extra: not listed"]


# --- Read the Docs -----------------------------------------------------------------------------


def read_the_docs_problems(config: dict, extras: dict) -> list[str]:
    """What keeps Read the Docs from building the site as ``make docs`` does."""
    problems = []
    if config.get("version") != 2:
        problems.append("version is not 2")
    build = config.get("build", {})
    if build.get("os") != "ubuntu-24.04":
        problems.append("build.os is not ubuntu-24.04")
    if str(build.get("tools", {}).get("python")) not in ("3.11", "3.12"):
        problems.append("build.tools.python is not 3.11 or 3.12")
    sphinx = config.get("sphinx", {})
    if sphinx.get("configuration") != "docs/conf.py":
        problems.append("sphinx.configuration is not docs/conf.py")
    if sphinx.get("fail_on_warning") is not True:
        problems.append("warnings do not fail the build (make docs: -W)")
    installs = config.get("python", {}).get("install", [])
    package = [i for i in installs if i.get("method") == "pip" and i.get("path") == "."]
    if not package:
        problems.append("the package is not installed (python.install: method pip, path .)")
    wanted = {e for i in package for e in i.get("extra_requirements", [])}
    problems += [f"extra {e!r} is not in pyproject.toml" for e in sorted(wanted - set(extras))]
    if "docs" not in wanted:
        problems.append("the docs extra is not installed")
    return problems


def read_the_docs_config() -> dict:
    return yaml.safe_load(read(os.path.join(ROOT, ".readthedocs.yaml")))


def test_read_the_docs_builds_docs_conf_py_with_the_docs_extra():
    assert read_the_docs_problems(read_the_docs_config(), PYPROJECT["optional-dependencies"]) == []


def test_the_read_the_docs_check_finds_what_is_wrong():
    config = read_the_docs_config()
    config["sphinx"]["configuration"] = "conf.py"
    config["python"]["install"][0]["extra_requirements"] = ["documentation"]
    assert read_the_docs_problems(config, PYPROJECT["optional-dependencies"]) == [
        "sphinx.configuration is not docs/conf.py",
        "extra 'documentation' is not in pyproject.toml",
        "the docs extra is not installed",
    ]


def test_what_autodoc_imports_comes_with_the_package_and_its_docs_extra():
    """The API reference imports lbtrain.optim, which needs only the core dependencies (installed
    with the package); the site's own extension needs only the standard library."""
    code = (
        "import json, sys, importlib; importlib.import_module('lbtrain.optim'); "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    top = set(json.loads(proc.stdout))
    for heavy in ("flax", "tensorflow_datasets", "orbax", "matplotlib", "torch"):
        assert heavy not in top, heavy
    core = {re.split(r"[<>=!~ \[]", d)[0].replace("-", "_") for d in PYPROJECT["dependencies"]}
    assert core <= top | {"numpy"}
