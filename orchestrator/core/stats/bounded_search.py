"""Brent's bounded minimisation as SciPy's ``minimize_scalar(method="bounded")`` runs it, step
for step, but as a generator: it yields each point it needs and is sent the function's value
there. Several searches driven side by side then share one vectorised evaluation a step
(``minimize_together``), where SciPy would call the function once a point and a search.

Transcribed from scipy/optimize/_optimize.py (``_minimize_scalar_bounded``, SciPy 1.17, BSD
licence) without its messages; tests/test_regression_stats.py checks that the points and the
minimum are SciPy's own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence

import numpy as np
from numpy.typing import NDArray

SQRT_EPS = math.sqrt(2.2e-16)
GOLDEN_MEAN = 0.5 * (3.0 - math.sqrt(5.0))
MAX_EVALUATIONS = 500  # SciPy's maxiter


def _sign_or_one(x: float) -> float:
    """np.sign(x) + (x == 0): the direction of a step, forwards when there is none."""
    return 1.0 if x >= 0.0 else -1.0


def bounded_search(low: float, high: float,
                   xatol: float) -> Generator[float, float, tuple[float, float]]:
    """Yields the points whose values the search needs, one at a time; returns (x, f(x)) of
    the least value found."""
    a, b = low, high
    fulc = a + GOLDEN_MEAN * (b - a)
    nfc = xf = fulc
    rat = e = 0.0
    fx = yield xf
    evaluations = 1
    ffulc = fnfc = fx
    xm = 0.5 * (a + b)
    tol1 = SQRT_EPS * abs(xf) + xatol / 3.0
    tol2 = 2.0 * tol1
    while abs(xf - xm) > tol2 - 0.5 * (b - a):
        golden = True
        if abs(e) > tol1:  # try a parabola through the three best points
            golden = False
            r = (xf - nfc) * (fx - ffulc)
            q = (xf - fulc) * (fx - fnfc)
            p = (xf - fulc) * q - (xf - nfc) * r
            q = 2.0 * (q - r)
            if q > 0.0:
                p = -p
            q = abs(q)
            r = e
            e = rat
            if abs(p) < abs(0.5 * q * r) and q * (a - xf) < p < q * (b - xf):
                rat = (p + 0.0) / q
                x = xf + rat
                if (x - a) < tol2 or (b - x) < tol2:
                    rat = tol1 * _sign_or_one(xm - xf)
            else:
                golden = True
        if golden:
            e = (a - xf) if xf >= xm else (b - xf)
            rat = GOLDEN_MEAN * e
        x = xf + _sign_or_one(rat) * max(abs(rat), tol1)
        fu = yield x
        evaluations += 1
        if fu <= fx:
            if x >= xf:
                a = xf
            else:
                b = xf
            fulc, ffulc = nfc, fnfc
            nfc, fnfc = xf, fx
            xf, fx = x, fu
        else:
            if x < xf:
                a = x
            else:
                b = x
            if fu <= fnfc or nfc == xf:
                fulc, ffulc = nfc, fnfc
                nfc, fnfc = x, fu
            elif fu <= ffulc or fulc in (xf, nfc):
                fulc, ffulc = x, fu
        xm = 0.5 * (a + b)
        tol1 = SQRT_EPS * abs(xf) + xatol / 3.0
        tol2 = 2.0 * tol1
        if evaluations >= MAX_EVALUATIONS:
            break
    return xf, fx


def minimize_together(function: Callable[[NDArray[np.float64]], NDArray[np.float64]],
                      brackets: Sequence[tuple[float, float]],
                      xatol: float) -> list[tuple[float, float]]:
    """(x, f(x)) of the least value ``bounded_search`` finds in each bracket, ``function``
    called on the points of every search still running at once."""
    searches = [bounded_search(low, high, xatol) for low, high in brackets]
    found: list[tuple[float, float]] = [(math.nan, math.nan)] * len(searches)
    waiting = {i: next(search) for i, search in enumerate(searches)}
    while waiting:
        values = function(np.array(list(waiting.values())))
        for i, value in zip(list(waiting), values.tolist(), strict=True):
            try:
                waiting[i] = searches[i].send(value)
            except StopIteration as done:
                found[i] = done.value
                del waiting[i]
    return found
