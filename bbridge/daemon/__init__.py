"""The trio runtime between clients and bridge subprocesses.

Holds provider configuration (`config`), bridge processes with their
assemblers, guards and watchdogs (`bridge`, `watchdog`), the router that
forwards client requests and fans events out (`router`), client transports on
stdio and a Unix socket (`server`), the per-thread event journal (`journal`),
open-work tracking for settlement (`tracker`), extension payload checks
(`extensions`), client-declared tools with the checks a tool call passes
before it is relayed (`declared_tools`, validating in `toolcheck` processes)
and pending bridge requests awaiting a client (`pending`). May import the wire
and the core; never the kit, replay or the CLI, which sit beside or above it.
"""
