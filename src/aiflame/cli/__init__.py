"""The ``aiflame`` command: one thin module per subcommand."""
