"""`bbridge bench`: core, daemon, hosted-tool, scale, memory, page and coalescing figures (BENCHMARKS.md says how each
is measured).

The package root stays import-free: the fake bridge and the client subprocesses import `stream` from it.
"""
