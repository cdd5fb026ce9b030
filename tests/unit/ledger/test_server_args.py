"""The server ledger's connection arguments: the password from the secrets, not the URL."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from ledger.base import LedgerError
from ledger.server import client_args
from runtime.settings import SecretFileError, Settings


def test_password_file_wins_over_the_url(tmp_path: Path) -> None:
    secret = tmp_path / "ch-password"
    secret.write_text("s3cr%t\n", encoding="utf-8")
    settings = Settings(clickhouse_url="https://fw@ch.example:8443/fabricwatch",
                        secrets={"clickhouse_password_file": secret})
    password = settings.clickhouse_password()
    assert password is not None and "s3cr" not in repr(password)
    args = client_args(settings.clickhouse_url or "", database="fabricwatch", compress=True,
                       password=password)
    assert (args["host"], args["port"], args["username"], args["password"], args["secure"]) == (
        "ch.example", 8443, "fw", "s3cr%t", True)


def test_url_password_is_used_when_no_secret_is_set() -> None:
    args = client_args("http://fw:p%40ss@ch:8123/db", database=None, compress=False)
    assert (args["port"], args["username"], args["password"], args["database"]) == (
        8123, "fw", "p@ss", "__default__")
    args = client_args("http://ch/db", database="db", compress=False,
                       password=SecretStr("x"))
    assert (args["username"], args["password"]) == ("default", "x")


def test_unreadable_password_file_names_the_file_not_the_secret(tmp_path: Path) -> None:
    settings = Settings(secrets={"clickhouse_password_file": tmp_path / "missing"})
    with pytest.raises(SecretFileError, match="missing"):
        settings.clickhouse_password()
    assert Settings().clickhouse_password() is None


def test_a_non_http_url_is_refused() -> None:
    with pytest.raises(LedgerError, match="http"):
        client_args("tcp://ch:9000/db", database=None, compress=False)
