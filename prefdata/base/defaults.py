"""Defaults that the command line shares with modules too heavy for `prefdata --help` (they load
polars): written once here, read by those modules and by the commands' options, so the help shows
them without loading what uses them. Only values here, no imports.
"""

# rows converted at a time (prefdata.data.columnar): one batch's text, ids and normalised copies are
# what an import or a check of a big file holds in memory
BATCH_ROWS = 1_000_000
# a row with a larger text field is quarantined (prefdata.data.importer): 1 MiB
MAX_TEXT_BYTES = 1 << 20
# the format of a file to import (prefdata.data.importer): auto reads it from the file's fields
IMPORT_FORMAT = "auto"
# the row-level checks whose offending rows `prefdata filter` removes unless told (prefdata.gate.filtering)
FILTER_DROP = ("exact_duplicates", "near_duplicates", "length_ratio", "degenerate_pairs")
# the port of the local Argilla server (prefdata.argilla.server): Argilla's own default
ARGILLA_PORT = 6900
