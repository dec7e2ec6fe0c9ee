#!/bin/sh
# Record a session with your bridge and bless it: run once, locally, from your repository's root, then commit
# tests/bridge-cells/ and tests/bridge-golden/. BRIDGE is your bridge's command line.
set -eu
bbridge run --provider-cmd "$BRIDGE" --prompt "hello there" --record tests/bridge-cells --cell hello
bbridge golden tests/bridge-cells/bridge/hello --out tests/bridge-golden
