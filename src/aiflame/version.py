"""The package's version: a leaf every layer may import (the package root imports the
display layer, so no module below it imports the root for its version)."""

__version__ = "0.1.0"
