"""Column names: DAPFAM's, as on the hub. Every loader renders its input into these."""

QUERY_ID = "query_id"
DOC_ID = "relevant_id"
TITLE = "title_en"
ABSTRACT = "abstract_en"
CLAIMS = "claims_text"
DESCRIPTION = "description_en"
KEYWORDS = "abstract_keywords"
IPC3 = "classifications_ipcr_list_first_three_chars_list"
RELEVANCE = "relevance_score"
DOMAIN = "domain_rel"

QUERY_COLUMNS = [QUERY_ID, TITLE, ABSTRACT, CLAIMS, KEYWORDS, IPC3]
CORPUS_COLUMNS = [DOC_ID, TITLE, ABSTRACT, CLAIMS, DESCRIPTION, IPC3]
QRELS_COLUMNS = [QUERY_ID, DOC_ID, RELEVANCE, DOMAIN]

# Passage ids are "<family id>#<n>": a family id must not contain the separator.
PASSAGE_SEP = "#"


class DataError(ValueError):
    """Bad input data. The message names the file, the column and the fix."""
