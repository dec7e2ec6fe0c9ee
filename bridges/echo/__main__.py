"""`python -m bridges.echo`: the echo bridge on stdio; `--help` prints the package's text (the prompt directives)."""

import argparse

import bridges.echo
from bridges.echo.bridge import EchoBridge

parser = argparse.ArgumentParser(
    prog="python -m bridges.echo",
    description=bridges.echo.__doc__,
    formatter_class=argparse.RawDescriptionHelpFormatter,
)
parser.parse_args()
EchoBridge().bridge.run()
