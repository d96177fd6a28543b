"""Regression sweeps: runs, baselines, hunts, schedules."""
