"""Variant kinds beyond env vars and flags: file patches, git refs, and pre/post hooks.

Each kind changes one node through its transport, records on the node how to undo it (under
``WORKDIR/bisect-variants/``) and reverts exactly; see ``base.Variant``.
"""

from deploy.variants.base import Applied, Variant, VariantError
from deploy.variants.diffparse import DiffError
from deploy.variants.gitref import GitRef, check_refs, resolve_range
from deploy.variants.hooks import Hook, HookResult, run_hook, run_hooks
from deploy.variants.patch import FilePatch
from deploy.variants.plan import NodeVariants, plan, recover

__all__ = [
    "Applied", "DiffError", "FilePatch", "GitRef", "Hook", "HookResult", "NodeVariants",
    "Variant", "VariantError", "check_refs", "plan", "recover", "resolve_range", "run_hook",
    "run_hooks",
]
