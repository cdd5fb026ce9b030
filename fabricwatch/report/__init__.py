"""The report: ledger queries (build), an HTML file with SVG plots (html), a terminal summary."""
