"""aiflame: full-stack flame graphs for AI workloads (CPU, GPU time, GPU memory).

In Python and Jupyter: ``aiflame.load(path)`` reads any input the command line reads into a
:class:`Profile`; ``aiflame.show(profile_or_path)`` displays its interactive flame graph in
a notebook, as does a :class:`Profile` left as a cell's value.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from aiflame.version import __version__

__all__ = ["Profile", "__version__", "flame_graph", "load", "show"]

if TYPE_CHECKING:
    from aiflame.model import Profile
    from aiflame.notebook import flame_graph, load, show


def __getattr__(name: str) -> Any:
    # Imported on first use: the command line must not pay for numpy to print --version.
    if name == "Profile":
        from aiflame import notebook  # registers how a notebook shows a profile

        return notebook.Profile
    if name in ("load", "show", "flame_graph"):
        from aiflame import notebook

        return getattr(notebook, name)
    raise AttributeError(f"module 'aiflame' has no attribute '{name}'")


def _profile_html(profile: Profile) -> str | None:
    from aiflame.notebook import profile_html

    return profile_html(profile)


def _register_with_ipython() -> None:
    """In a running IPython kernel, show profiles as their flame graph however they were
    made (``aiflame.sources.load`` too): registered by the class's name, so that nothing is
    imported until a profile is displayed. ``aiflame.notebook`` registers the same for
    other front ends (``Profile._repr_html_``) when it is imported."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    formatters = getattr(getattr(shell, "display_formatter", None), "formatters", None)
    if formatters and "text/html" in formatters:
        formatters["text/html"].for_type_by_name("aiflame.model.profile", "Profile", _profile_html)


_register_with_ipython()
