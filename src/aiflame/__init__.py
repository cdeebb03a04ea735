"""aiflame: full-stack flame graphs for AI workloads (CPU, GPU time, GPU memory).

In Python and Jupyter: ``aiflame.load(path)`` reads any input the command line reads into a
:class:`Profile`; ``aiflame.show(profile_or_path)`` displays its interactive flame graph in
a notebook, as does a :class:`Profile` left as a cell's value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["Profile", "__version__", "flame_graph", "load", "show"]

if TYPE_CHECKING:
    from aiflame.model import Profile
    from aiflame.notebook import flame_graph, load, show


def __getattr__(name: str) -> Any:
    # Imported on first use: the command line must not pay for numpy to print --version.
    if name == "Profile":
        from aiflame.model import Profile

        return Profile
    if name in ("load", "show", "flame_graph"):
        from aiflame import notebook

        return getattr(notebook, name)
    raise AttributeError(f"module 'aiflame' has no attribute '{name}'")
