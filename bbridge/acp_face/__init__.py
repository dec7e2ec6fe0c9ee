"""`bbridge acp`: bbridge as one ACP agent, a room above the daemon that speaks only its client API.

`agent` is the editor's connection and the sessions' requests; `sessions` one session's thread and prompt;
`permissions` pending approvals and questions as `session/request_permission`; `updates` (pure) thread events as
`session/update`s; `options` (pure) the Session Config Options; `messages` the ACP messages read; `index` the
sessions' `cwd`, provider and title kept beside the daemon.
"""
