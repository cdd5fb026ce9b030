"""What every process of fabricwatch runs with, importable from every layer: its settings
(``runtime.settings``: the environment, the state folder, the engines' addresses) and its
Prometheus metrics (``runtime.metrics``). It imports nothing of fabricwatch's own, so the
schemas, collectors, ledger, streams and workflows may use it without reaching up into the
command-line package."""
