"""Multiplicity corrections of a family of p-values, by name: the names a plan's ``[analysis]``
section uses (``protocol.registration.CORRECTIONS``), computed by statsmodels' ``multipletests``.

* ``holm``: Holm (1979) step-down, controls the family-wise error rate (the chance of any false
  finding) under any dependence;
* ``bonferroni``: p times the number of tests, the same control, never smaller than Holm's;
* ``bh``: Benjamini & Hochberg (1995), controls the false discovery rate (the expected share of false
  findings among those called);
* ``none``: the p-values as they are (one primary endpoint, or a section that says so).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from statsmodels.stats.multitest import multipletests

METHODS = {"holm": "holm", "bonferroni": "bonferroni", "bh": "fdr_bh"}


def adjust(p: pd.Series | list[float], correction: str) -> pd.Series:
    """Adjusted p of each finite entry of ``p`` among all finite entries (NaN stays NaN)."""
    p = pd.Series(p, dtype=float)
    if correction == "none":
        return p.copy()
    if correction not in METHODS:
        raise ValueError(f"unknown correction {correction!r}; known: none, {', '.join(METHODS)}")
    out = pd.Series(np.nan, index=p.index, dtype=float)
    finite = p.notna()
    if finite.any():
        out[finite] = multipletests(p[finite].to_numpy(float), method=METHODS[correction])[1]
    return out
