from fmest.cli import entry

entry()
