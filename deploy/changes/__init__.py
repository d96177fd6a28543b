"""Changes beyond env vars and flags: file patches, git refs, and pre/post hooks.

Each kind changes one node through its transport, records on the node how to undo it (under
``WORKDIR/bisect-variants/``) and reverts exactly; see ``base.Change``.
"""

from deploy.changes.base import Applied, Change, ChangeError, Expected
from deploy.changes.diffparse import DiffError
from deploy.changes.gitref import GitRef, check_refs, resolve_range
from deploy.changes.hooks import Hook, HookResult, run_hook, run_hooks
from deploy.changes.patch import FilePatch
from deploy.changes.plan import NodeChanges, plan, recover

__all__ = [
    "Applied", "Change", "ChangeError", "DiffError", "Expected", "FilePatch", "GitRef", "Hook",
    "HookResult", "NodeChanges", "check_refs", "plan", "recover", "resolve_range", "run_hook",
    "run_hooks",
]
