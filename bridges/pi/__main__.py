"""`python -m bridges.pi`: the pi provider bridge on stdio."""

from bridges.pi.bridge import PiBridge

PiBridge().bridge.run()
