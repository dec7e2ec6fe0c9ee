"""`bbridge.wire.client_api` under its first name: the README told users to import the client API's types from
`bbridge.wire.client` (say, to annotate what `bbridge.client.Client.pending` returns), so that import stays.

Public API, kept on purpose; inside bbridge import `bbridge.wire.client_api`.
"""

from bbridge.wire.client_api import *  # noqa: F403
