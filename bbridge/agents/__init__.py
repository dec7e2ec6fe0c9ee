"""Agents configured once (issue 47): the `[[agents]]` contributions and `[skills.roots.NAME]` of `bbridge.toml`,
resolved for a thread's context before every construction and turn, for every provider alike. `resolve.Agents` is
what the daemon calls (`bbridge.seams.agent_config.AgentConfigurer`); `config` reads the file, `skills` the skill
roots, `gitinfo` a work tree's root and origin remote, `plugins` the Claude Code plugin directory a root is loaded
as, `explain` `bbridge config explain`'s text.
"""
