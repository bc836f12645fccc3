"""Quality checks: the 12-point checklist as pure functions over polars frames."""
