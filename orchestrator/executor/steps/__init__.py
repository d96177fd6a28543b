"""A trial as a chain of named steps: apply → restart → health → prove → hooks → facts → stress →
collect (``probe`` in place of ``stress`` where the campaign's workload is the user's own probe).

restart, health and prove run once per service of the pool, in declared order (a router after
the servers it routes to), and are skipped for a service the variant leaves unchanged. Each step
is timed and says what it observed (the proof of load's checks, the sessions run); the chain
stops at the first failure and the steps after it are recorded as skipped. ``facts`` runs once
per node of the pool (its ``service`` is the node's name) and never fails: what it cannot read
is None (deploy.facts).

Each step is its own object, built for one trial with what it needs (base.py says how); the
modules: base (parts, failures, ``run_chain``), deploy, facts, workload, chain (the wiring).

A failure has one of three classes, decided by the exception's TYPE: ``infrastructure`` (the way
to the node, a load generator: retried, never judged), ``variant`` (the variant could not be
deployed, never became healthy or could not be proven loaded: evidence, unresolvable after
``runner.MAX_FAILED_ATTEMPTS``) or ``setup`` (the node's own setup, whatever the variant: a unit
not installed or that cannot start; the run stops at once, as bad input).
"""
