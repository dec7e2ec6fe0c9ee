"""The trio runtime between clients and bridge subprocesses.

Holds provider configuration (`config`), bridge processes with their
assemblers, guards and watchdogs (`bridge`, `watchdog`), the router that
forwards client requests and fans events out (`router`), client transports on
stdio and a Unix socket (`server`), the per-thread event journal (`journal`),
open-work tracking for settlement (`tracker`) and extension payload checks
(`extensions`). May import the wire and the core; never the kit, replay or the
CLI, which sit beside or above it.
"""
