"""Error codes the daemon itself answers with (daemon.md §3); bridge errors pass through unchanged."""

UNKNOWN_PROVIDER = -32010
BRIDGE_START_FAILED = -32011
HANDSHAKE_REFUSED = -32012
NOT_ADVERTISED = -32013
BRIDGE_EXITED = -32014
BRIDGE_TIMEOUT = -32015
UNAUTHORIZED = -32016
NO_CLIENT = -32017
UNKNOWN_THREAD = -32018
SHUTTING_DOWN = -32019
ALREADY_RESOLVED = -32020  # interaction/respond to a request another client (or the daemon's policy) resolved first
UNKNOWN_REQUEST = -32021  # interaction/respond naming no request the daemon knows
SKILLS_REFUSED = -32022  # a bridge refused `skills/configure` with changed skill roots (at a construction)
BUDGET_EXCEEDED = (
    -32023
)  # a `[[budgets]]` entry refused a turn/start, turn/steer or budgets/check (data: who, how much)
