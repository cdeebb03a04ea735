"""Collectors: record live programs (py-spy sampling, the PyTorch profiler) into a Profile."""
