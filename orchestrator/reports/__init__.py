"""Reports: built from the store through ``orchestrator.stored``, never from the executor."""
