"""Pure functions Profile -> Profile (merge, focus, hide, invert, group-by, diff)."""
