"""`approve:<kind>`: the approval the echo bridge asks for before it answers, and the decision read back.

The subjects are fixed payloads of each kind (nothing is run); the ids are the bridge's own
(`providerNativeIds: true`), the subject's `itemId` is `approval-<turn number>`.
"""

from __future__ import annotations

import msgspec

from bbridge.kit import Bridge
from bbridge.wire import interactions as ia
from bbridge.wire import rpc

APPROVAL_KINDS = ("command", "file_change", "permission_grant", "plan")


def approval_subject(
    kind: str, item_id: str, cwd: str
) -> ia.CommandSubject | ia.FileChangeSubject | ia.PermissionGrantSubject | ia.PlanSubject:
    """The fixed subject `approve:<kind>` asks about."""
    if kind == "command":
        return ia.CommandSubject(itemId=item_id, command="echo approve", cwd=cwd, actions=[], sessionGrant=None)
    if kind == "file_change":
        return ia.FileChangeSubject(itemId=item_id, writeScope=cwd, sessionGrant=None)
    if kind == "permission_grant":
        grant = ia.GrantProfile(network=ia.NetworkGrant(enabled=True), fileSystem=None)
        return ia.PermissionGrantSubject(itemId=item_id, toolName="echo", permissions=grant)
    return ia.PlanSubject(itemId=item_id, plan="1. Echo the prompt.", planFilePath=None)


async def ask(bridge: Bridge, thread_id: str, provider_thread_id: str, cwd: str, kind: str, number: int) -> bool:
    """Ask turn `number`'s approval (`interaction/request`); True when the answer allows it (a refusal denies)."""
    payload = ia.ApprovalPayload(
        subject=approval_subject(kind, f"approval-{number}", cwd),
        reason=f"echo asks before it answers ({kind})",
        availableDecisions=["allow_once", "allow_for_session", "deny"],
    )
    request = ia.InteractionRequestParams(
        providerThreadId=provider_thread_id,
        threadId=thread_id,
        turnId=None,
        payload=payload,
        providerNativeIds=True,
    )
    try:
        answer = await bridge.request("interaction/request", msgspec.to_builtins(request))
    except rpc.RpcError:
        return False
    return isinstance(answer, dict) and answer.get("decision") in ("allow_once", "allow_for_session")
