"""Column names: DAPFAM's, as on the hub. Every loader renders its input into these."""

QUERY_ID = "query_id"
DOC_ID = "relevant_id"
TITLE = "title_en"
ABSTRACT = "abstract_en"
CLAIMS = "claims_text"
DESCRIPTION = "description_en"
KEYWORDS = "abstract_keywords"
IPC3 = "classifications_ipcr_list_first_three_chars_list"
IPC_FULL = "ipcr_codes_str"  # full IPC codes (e.g. "A61K 31/00"), for levers that want IPC4 or sections
RELEVANCE = "relevance_score"
DOMAIN = "domain_rel"

QUERY_COLUMNS = [QUERY_ID, TITLE, ABSTRACT, CLAIMS, KEYWORDS, IPC3]
CORPUS_COLUMNS = [DOC_ID, TITLE, ABSTRACT, CLAIMS, DESCRIPTION, IPC3]
QRELS_COLUMNS = [QUERY_ID, DOC_ID, RELEVANCE, DOMAIN]

# What each file must hold to load at all; every other column enables a feature, and a file that
# lacks it loads with that feature refused by name (:meth:`harness.data.Dataset.require`).
REQUIRED = {"queries": [QUERY_ID], "corpus": [DOC_ID], "qrels": [QUERY_ID, DOC_ID, RELEVANCE]}
ENABLES = {
    TITLE: "the views with titles (T, TA, TAC, FULL)",
    ABSTRACT: "the views with abstracts (TA, TAC, FULL)",
    CLAIMS: "the views with claims (TAC, FULL)",
    DESCRIPTION: "the FULL and DESC target views",
    KEYWORDS: "the KW query view",
    IPC3: "IN/OUT from IPC3 codes (dataset.domain_source=ipc3), rerank=ipc3_disjoint and IPC3 features",
    DOMAIN: "the file's IN/OUT labels (without them IN/OUT comes from IPC3 codes)",
}
# Passage ids are "<family id>#<n>": a family id must not contain the separator.
PASSAGE_SEP = "#"


class DataError(ValueError):
    """Bad input data. The message names the file, the column and the fix."""
