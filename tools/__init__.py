"""Maintenance scripts of this repository, run as `python -m tools.NAME`; nothing imports them."""
