"""Sphinx configuration of lbtrain's documentation site: the markdown pages of docs/ (MyST), the
results pages of experiments/results with their plots (docs/_ext/results_pages.py copies them into
docs/results/ when a build starts) and the API reference of lbtrain.optim (autodoc over its
docstrings, Google style through napoleon). Formulas are typeset by MathJax: ``$...$`` and
``$$...$$`` in the pages, ``:math:`` and ``.. math::`` in the docstrings.

``make docs`` builds it into build/docs/html, offline (no intersphinx), with warnings as errors.
"""

import importlib
import os
import pkgutil
import sys

# the checkout, so that autodoc imports lbtrain.optim from this tree, and this site's own extension
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "_ext")))

project = "lbtrain"
author = "the lbtrain authors"
copyright = "the lbtrain authors, Apache License 2.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "results_pages",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
# docs/bench holds benchmark records (JSON), not pages; docs/_ext the site's extension
exclude_patterns = ["_build", "bench", "_ext"]

# MyST: `#anchor` links within and between pages resolve to the headings' slugs (GitHub's);
# ::: fences (the results pages' figures); $...$, $$...$$ and amsmath environments as math
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "dollarmath", "amsmath"]

# The API reference: Google-style sections (Args, Returns, Raises, Example); entries in the order
# the page lists them; the type aliases keep their names rather than their expansion.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_type_aliases = {
    "optax.Schedule": "optax.Schedule",
    "optax.ScalarOrSchedule": "optax.ScalarOrSchedule",
    "optax.GradientTransformation": "optax.GradientTransformation",
    "jax.typing.ArrayLike": "jax.typing.ArrayLike",
    "Mask": "lbtrain.optim.masks.Mask",
}


html_theme = "furo"
html_title = "lbtrain"


def _constant_doc(name: str) -> list[str] | None:
    """The ``#:`` comment above ``name``'s assignment in the lbtrain.optim module that defines it.

    lbtrain.optim re-exports its constants from its modules, and autodoc reads ``#:`` comments in
    the module it documents (the package), so without this a constant would show its type's
    docstring (tuple's, dict's) instead of its own."""
    from sphinx.pycode import ModuleAnalyzer

    package = importlib.import_module("lbtrain.optim")
    for info in pkgutil.iter_modules(package.__path__, "lbtrain.optim."):
        found = ModuleAnalyzer.for_module(info.name).find_attr_docs().get(("", name))
        if found:
            return list(found)
    return None


def _document_constants(app, what, name, obj, options, lines):
    if what == "data" and name.startswith("lbtrain.optim."):
        found = _constant_doc(name.rsplit(".", 1)[1])
        if found:
            lines[:] = found


def setup(app):
    app.connect("autodoc-process-docstring", _document_constants)
