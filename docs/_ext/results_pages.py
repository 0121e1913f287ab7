"""The results pages of experiments/results as pages of the site, their plots shown as images.

Those pages are rendered by ``scripts/reproduce.py --render`` and must stay byte for byte what it
writes, so the site does not read them in place. When a build starts, each is copied into
``docs/results/`` (written afresh by every build and ignored by git) with its links rewritten for
the site, and with a "Plots" section that shows the PNGs it links to. experiments/results/README.md,
the pages' entry, becomes ``results/index.md`` and lists the pages in a hidden toctree, in the order
it links them. The copies read no ``$`` as math (their front matter leaves MyST's dollarmath off).

A link of a page is rewritten by what it reaches from experiments/results:

- another results page: the same page of the site (README.md is ``index.md``);
- a page of docs/ (``../../docs/reproduce.md``): that page, from ``docs/results/``;
- a file beside the pages (a plot, a CSV): the file, copied beside the page (a download link);
- anything else (a run's folder, a file that does not exist): its text and, in code, its path from
  the repository, so the site never links to what it does not hold.

The other pages of docs/ link to a results page where it is in the repository
(``../experiments/results/gnmt_local.md``), so that the link works on GitHub too; on the site such
a link goes to the site's copy of the page (:func:`link_results`, as each page is read).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RESULTS = os.path.join(REPO, "experiments", "results")
DOCS = os.path.join(REPO, "docs")
OUT = os.path.join(DOCS, "results")  # its docnames: results/index, results/<page>
ENTRY = "README.md"
INDEX = "index.md"
IGNORE = "# written by docs/_ext/results_pages.py at every docs build: not source\n*\n"
# the pages are prose and tables, never TeX: a "$" in them (a price, a shell variable) stays text
FRONT_MATTER = '---\nmyst:\n  enable_extensions: ["colon_fence"]\n---\n'

# [text](target) that is no image: the text without brackets, the target without spaces
LINK = re.compile(r"(?<!!)\[([^\[\]]+)\]\(([^()\s]+)\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def site_name(page: str) -> str:
    return INDEX if page == ENTRY else page


def page_names(results: str = RESULTS) -> list[str]:
    """The results pages: the entry first, then every other ``.md`` beside it, by name."""
    names = sorted(n for n in os.listdir(results) if n.endswith(".md") and n != ENTRY)
    return [ENTRY] + names


def rewrite_target(target: str, results: str, docs: str, pages: Iterable[str]) -> str | None:
    """Where a page's link goes on the site (relative to ``docs/results/``), or None where the site
    holds nothing it could go to."""
    if EXTERNAL.match(target) or target.startswith("#"):
        return target
    path, hash_, fragment = target.partition("#")
    resolved = os.path.normpath(os.path.join(results, path))
    if os.path.dirname(resolved) == os.path.normpath(results):
        name = os.path.basename(resolved)
        if name in pages:
            return site_name(name) + hash_ + fragment
        if os.path.isfile(resolved):
            return name + hash_ + fragment
        return None
    if resolved.startswith(os.path.normpath(docs) + os.sep) and os.path.isfile(resolved):
        site = os.path.join(docs, "results")
        return os.path.relpath(resolved, site).replace(os.sep, "/") + hash_ + fragment
    return None


def rewrite(text: str, results: str, docs: str, pages: Iterable[str]) -> tuple[str, list[str]]:
    """A page's text for the site and the files beside it that its links reach (to be copied)."""
    pages = list(pages)
    files: list[str] = []

    def one(match: re.Match) -> str:
        label, target = match.group(1), match.group(2)
        new = rewrite_target(target, results, docs, pages)
        if new is None:
            path = os.path.relpath(os.path.normpath(os.path.join(results, target)), REPO)
            return f"{label} (`{path.replace(os.sep, '/')}`)"
        name = new.partition("#")[0]
        if name and name not in files and name not in map(site_name, pages) and "/" not in name:
            files.append(name)
        return f"[{label}]({new})"

    return LINK.sub(one, text), files


def plots_section(text: str) -> str:
    """``## Plots``: a figure for each PNG the page links to, in order, captioned with its link's
    text; empty where it links to none."""
    seen, figures = set(), []
    for label, target in LINK.findall(text):
        if target.endswith(".png") and not EXTERNAL.match(target) and target not in seen:
            seen.add(target)
            figures.append(f":::{{figure}} {target}\n:alt: {label}\n\n{label}\n:::\n")
    if not figures:
        return ""
    return "\n## Plots\n\n" + "\n".join(figures)


def toctree(entry_text: str, pages: list[str]) -> str:
    """The entry's hidden toctree: the pages it links to in that order, then any other by name."""
    linked = [t for _, t in LINK.findall(entry_text) if t in pages and t != ENTRY]
    order = list(dict.fromkeys(linked + [p for p in pages if p != ENTRY]))
    entries = "\n".join(p.removesuffix(".md") for p in order)
    return f"\n```{{toctree}}\n:hidden:\n\n{entries}\n```\n"


def site_files(results: str = RESULTS, docs: str = DOCS) -> dict[str, bytes]:
    """Every file of ``docs/results/`` by name: the pages as the site shows them and the files
    they link to."""
    pages = page_names(results)
    out: dict[str, bytes] = {}
    for page in pages:
        with open(os.path.join(results, page), encoding="utf-8") as f:
            text = f.read()
        body, files = rewrite(text, results, docs, pages)
        body = FRONT_MATTER + body.rstrip("\n") + "\n" + plots_section(body)
        if page == ENTRY:
            body += toctree(text, pages)
        out[site_name(page)] = body.encode("utf-8")
        for name in files:
            with open(os.path.join(results, name), "rb") as f:
                out[name] = f.read()
    return out


def write(files: dict[str, bytes], out: str = OUT) -> None:
    """Make ``out`` hold exactly ``files`` (and its .gitignore), rewriting only what changed, so
    that Sphinx reads again only the pages that did."""
    os.makedirs(out, exist_ok=True)
    files = {**files, ".gitignore": IGNORE.encode()}
    for name in os.listdir(out):
        if name not in files:
            os.remove(os.path.join(out, name))
    for name, data in files.items():
        path = os.path.join(out, name)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                if f.read() == data:
                    continue
        with open(path, "wb") as f:
            f.write(data)


def link_results(text: str, folder: str, results: str = RESULTS, out: str = OUT) -> str:
    """A page of ``folder`` (under docs/) with its links to a results page in the repository turned
    into links to that page's copy on the site."""
    pages = set(page_names(results))

    def one(match: re.Match) -> str:
        label, target = match.group(1), match.group(2)
        if EXTERNAL.match(target) or target.startswith("#"):
            return match.group(0)
        path, hash_, fragment = target.partition("#")
        resolved = os.path.normpath(os.path.join(folder, path))
        if os.path.dirname(resolved) != os.path.normpath(results):
            return match.group(0)
        name = os.path.basename(resolved)
        if name not in pages:
            return match.group(0)
        site = os.path.relpath(os.path.join(out, site_name(name)), folder).replace(os.sep, "/")
        return f"[{label}]({site}{hash_}{fragment})"

    return LINK.sub(one, text)


def _generate(app) -> None:
    write(site_files())


def _link_results(app, docname: str, source: list[str]) -> None:
    if not docname.startswith("results/"):
        folder = os.path.dirname(os.path.join(app.srcdir, docname))
        source[0] = link_results(source[0], folder)


def setup(app):
    app.connect("builder-inited", _generate)
    app.connect("source-read", _link_results)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
