"""Renderers and exporters: take a Profile (or a CallTree), write a file."""
