"""The ClickHouse ledger: one interface, an embedded (chdb) and a server backend."""
