"""The pure core: evidence, statistics, strategies, attribution and the verdict.

Plain values in, plain values out: no Ray, SSH, SQLAlchemy, HTTP or Jinja (tests/test_layers.py).
"""
