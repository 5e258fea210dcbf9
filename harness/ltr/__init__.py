"""Learning to rank over the candidates of any runs: LightGBM's LambdaRank, cross-fitted over queries.

Fusion and re-ranking combine runs by fixed rules. A learned ranker can weigh what the runs say
(each run's score and rank, how many runs found a family, its passages) against what the data
says about the pair (shared IPC codes, IPC sections, length), and so *find* cross-domain prior art
that no rule promotes: a family far from the query's IPC3 codes but close in text.

Candidates are the union of each input run's top ``depth`` families (the final run and, for a
fusion, every fused run). Feature families (``ltr.features``; drop one for an ablation):

* ``run`` (about the pair): per input run, the score, the per-query min-max normalised score and
  the rank (a family a run did not retrieve: score missing, rank ``depth + 1``); for passage runs
  the number of retrieved passages and their mean score; the number of runs that retrieved the
  family; the query's length;
* ``domain`` (about the pair, the least a domain-aware ranker needs): whether query and candidate
  share no IPC3 code (the OUT relation itself) and no IPC section;
* ``ipc`` (about the pair): IPC3 codes shared with the query (count, Jaccard, disjoint flag), the
  same for IPC sections (the code's first character) and, where the data has full codes, IPC4 (the
  first four characters, a subclass in DAPFAM), and each side's number of IPC3 codes;
* ``ipcpair`` (about classes, learned): how often candidates of the query's IPC3 class x the
  candidate's IPC3 class (and IPC section x section) are positives, and OUT positives, in the
  training folds' judgments (smoothed rates; the best and the mean over the pair's codes).
  Learned across queries, but about class pairs ("which fields cite which"), never documents;
  computed inside cross-fitting, each row from folds other than its own and the held one;
* ``doc`` (the candidate's content, coarsely): its length in log2 buckets (1-2, 3-4, 5-8 ... words);
* ``doclen``: the exact length. **Identifying**: refused unless ``ltr.allow_identifying`` names it;
* ``prior`` (``ltr.prior=FILE``): how often the candidate is cited in judgments that are *not*
  scored (another dataset's or split's qrels), a citation prior done in the open.

**What the ranker may learn.** It learns from the judgments of the queries it is scored on (other
folds'). About query-candidate pairs, that is learning; about documents, it is the answer key:
on a fixed corpus, any value precise enough to tell documents apart (a length, a year, a count)
lets the model learn which documents *other* queries' judgments cite and rank those first (on
CACM, 94% of positive pairs have a target another query also cites). :func:`identity_check`
tests every family whose values belong to the candidate document: each document gets another
document's values (a random permutation over the corpus), the model is retrained, and a family
whose permuted copy beats a copy redrawn for every query-candidate row (which names no
document; the model without the family is reported too) on held-out queries (one-sided sign-flip
test over queries, nDCG@100 on ALL and OUT, Holm-corrected over every family and subset at
0.05) is *identifying*: the learned run is refused unless ``ltr.allow_identifying``
names the family, and then its tag and the results row say so. The check runs when a learned run
is built; ``python -m harness.ltr identity SCORES_KEY`` prints it.

Labels: 0 for a candidate that is not a positive, 1 for an IN-domain positive, 2 for an OUT-domain
one, with LambdaRank gains ``[0, 1, out_weight]``: ``out_weight=1`` learns ALL relevance, larger
values trade IN for OUT, so a researcher can trace the front.

**Cross-fitting.** Queries are split into ``folds`` folds by :func:`folds_of` (select's folds:
stratified by whether a query has OUT positives, same seed). A query's ranking always comes from
the model trained on the *other* folds, so every score this stage reports is out-of-fold. What is
guaranteed, exactly: *given the folds*, a query's judgments never move its own ranking
(``tests/test_ltr.py``); the folds themselves depend on which queries have an OUT positive, so a
judgment that turns a query's only OUT positive IN can move other queries between folds.
**Nested scores** (``nested.parquet``): for each outer fold f and each other fold g, g's queries
ranked by a model trained on the folds other than f and g. ``harness.select`` chooses fold f's
configuration on those, so neither f's model nor f's choice saw f's labels. Queries with no
positive are never scored; they are ranked by fold 0's model. LightGBM runs on one thread with
``deterministic=True``, so the same inputs give the same bytes.

**Train on one dataset, apply to another** (``ltr.train=DIR``, a DAPFAM-format folder): the same
runs are built on that dataset, one model learns from all of its judgments (an ``ltr_model``
artifact keyed by its features and qrels) and ranks this dataset's candidates; this dataset's
judgments are then never read by the ranker. This is how a DAPFAM user learns to rank: train
elsewhere, evaluate on DAPFAM.

Artifacts: the features (keyed by the input runs, topics and corpus; every objective reuses them;
the per-document values live in ``docs.parquet`` so the identity check can move them), the
identity check, and the learned run (keyed by the features, the qrels and every LightGBM setting)
with one model file per fold and ``importance.csv`` (gain and split counts per feature, family
and fold).
"""

from __future__ import annotations

from .cli import main  # noqa: F401  (python -m harness.ltr, and callers of harness.ltr.main)
from .features import (  # noqa: F401  (the package's face: harness.ltr.NAME)
    DOCUMENT_FAMILIES,
    FAMILIES,
    IDENTIFYING,
    PAIR_SMOOTHING,
    PairStats,
    candidates,
    document_features,
    family_of,
    ipc_features,
    labels,
    permuted,
    prior_features,
    run_features,
    side_table,
)
from .identity import (  # noqa: F401  (the package's face: harness.ltr.NAME)
    ALPHA,
    IdentifyingFeature,
    format_identity,
    identity_check,
    smallest_holm_p,
)
from .prior import (  # noqa: F401  (the package's face: harness.ltr.NAME)
    read_prior,
)
from .stages import (  # noqa: F401  (the package's face: harness.ltr.NAME)
    constant_families,
    ltr_label,
)
from .training import (  # noqa: F401  (the package's face: harness.ltr.NAME)
    fit,
    folds_of,
    learned_run,
    nested_fit,
    with_learned,
)
