from aiflame.cli.main import entry

entry()
