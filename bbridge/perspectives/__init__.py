"""Perspectives: the `help` and `gather_perspectives` tools, a council of hidden agents above the daemon.

A room above the daemon: it reaches the daemon through its client API and the tool host's interface only. The
pure parts live here, each unit-tested: `settings` reads `[perspectives]`, `tuples` resolves a phase's execution
tuple against the calling thread before any hidden thread exists, `prompts` holds the texts the hidden threads
are given, `delivery` the one message a run ends with (and the receipt, the run id, the scrubbing of internal
thread ids).
"""
