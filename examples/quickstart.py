# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # The harness from a notebook
#
# `harness.api` composes the same Hydra configs as `python -m harness.run`, checks them the same
# way and shares the same artifacts under `HARNESS_ROOT`: a notebook and a shell never compute a
# result twice. Open it with `jupytext --to notebook examples/quickstart.py`, or run it as it is.

# %%
import os
import shlex

from harness import api

# The test suite passes a smaller synthetic set through this variable; leave it unset for mini.
overrides = shlex.split(os.environ.get("EXAMPLE_OVERRIDES", ""))

# %% [markdown]
# One experiment: the results row as a pandas Series (the same numbers `harness.run` prints).

# %%
row = api.run("passage_bm25", *overrides)
scores = row[[f"{m}/{s}" for m in ("nDCG@100", "R@100") for s in ("ALL", "IN", "OUT")]].astype(float)
for name, value in scores.items():
    print(f"{name} {value:.4f}")

# %% [markdown]
# Its ranking (ir_measures' column names), its scores per query, and the OUT-domain judgments.

# %%
run = api.run_table(row)
per_query = api.per_query(row)
out_qrels = api.qrels(row, "OUT")
run.head()

# %%
# The queries where OUT-domain prior art is found worst
out = per_query[(per_query["subset"] == "OUT") & (per_query["measure"] == "nDCG@100")]
out.sort_values("value").head()

# %% [markdown]
# Every row computed under this root, as the sweep report shows them (best nDCG@100 first).

# %%
api.results()[["experiment", "nDCG@100/ALL", "nDCG@100/IN", "nDCG@100/OUT", "pareto"]]
