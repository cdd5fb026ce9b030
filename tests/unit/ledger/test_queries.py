"""The cookbook files and their parameters."""

from __future__ import annotations

import datetime as dt

import pytest

from ledger.queries import cookbook, params_for

EXPECTED = {"top_flapping_ports", "errors_by_su_rail", "port_history", "isolated_ports",
            "mttr_by_rung", "probes_vs_baseline", "open_miswires"}


def test_cookbook_is_complete_and_documented() -> None:
    book = cookbook()
    assert EXPECTED <= set(book)
    for q in book.values():
        assert len(q.description) > 40, q.name
        assert "fabric" in q.params


def test_params_defaults_and_missing() -> None:
    now = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    q = cookbook()["top_flapping_ports"]
    got = params_for(q, {"limit": 5}, "lab", now)
    assert got == {"fabric": "lab", "since": now - dt.timedelta(days=1), "until": now,
                   "limit": 5}
    with pytest.raises(KeyError, match="device"):
        params_for(cookbook()["port_history"], {}, "lab", now)
