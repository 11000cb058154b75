"""`mqbridge tables delete` and `POST /tables/delete` without Spark: the condition an identity or a
`--where` designates per table format, the request's checks, and the control plane's refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mqbridge.errors import ConfigError, PurgeError
from mqbridge.landing.rows import IDENTITY_COLUMN
from mqbridge.maintenance.entries import designating, request_deleter, who
from mqbridge.monitoring.access import Access
from mqbridge.monitoring.control import answer_tables_delete

TOKEN = "unit-token-3b8e"
AUTH = f"Bearer {TOKEN}"


def test_an_identity_matches_a_delta_tables_identity_scoped_or_not_and_a_parquet_tables_msg_id() -> None:
    delta = designating(["o-1", "it's"], None, identity_column=IDENTITY_COLUMN)
    assert delta == ("(identity IN ('o-1', 'it\\'s') OR "
                     "substring(identity, instr(identity, '|') + 1) IN ('o-1', 'it\\'s'))")
    assert designating(["ID:1"], None, identity_column=None) == "msg_id IN ('ID:1')"
    assert designating([], " amount < 0 ", identity_column=None) == "amount < 0"


@pytest.mark.parametrize(("identities", "where"), [([], None), ([], "  "), (["a"], "amount < 0")])
def test_a_request_names_its_rows_by_identity_or_where_exactly_one(identities: list[str], where: str | None) -> None:
    with pytest.raises(ConfigError, match="--identity or by --where"):
        designating(identities, where, identity_column=IDENTITY_COLUMN)


def test_who_names_the_os_user_and_the_control_plane_caller() -> None:
    assert who().startswith("OS user ")
    assert who("10.0.0.7").endswith(", control-plane caller 10.0.0.7")


@pytest.mark.parametrize(("request_", "complaint"), [
    ({"type": "orders", "where": "x = 1"}, '"reason"'),
    ({"type": 7, "where": "x = 1", "reason": "r"}, '"type"'),
    ({"type": "orders", "identity": "a", "reason": "r"}, '"identity"'),
    ({"type": "orders", "where": "x = 1", "reason": "r", "dry_run": "yes"}, '"dry_run"'),
    ({"type": "orders", "where": "x = 1", "reason": "r", "force": True}, "unknown field force"),
])
def test_the_http_request_is_checked_before_spark_is_asked_for(request_: dict[str, Any], complaint: str) -> None:
    def no_spark() -> Any:
        raise AssertionError("a bad request started Spark")
    with pytest.raises(ConfigError, match=complaint):
        request_deleter(None, no_spark)(request_, "127.0.0.1")  # type: ignore[arg-type]


def deleter(answer: dict[str, Any] | Exception) -> Any:
    def delete(request: dict[str, Any], caller: str) -> dict[str, Any]:
        if isinstance(answer, Exception):
            raise answer
        return {**answer, "caller": caller}
    return delete


def test_post_tables_delete_is_refused_without_a_configured_token_or_the_right_one() -> None:
    body = json.dumps({"type": "orders", "where": "x = 1", "reason": "r"}).encode()
    off = answer_tables_delete(Access(), deleter({}), "/tables/delete", AUTH, "127.0.0.1", body)
    assert off.code == 403 and b"control plane is off" in off.body
    wrong = answer_tables_delete(Access(TOKEN.encode()), deleter({}), "/tables/delete", "Bearer nope", "c", body)
    assert wrong.code == 401


def test_post_tables_delete_answers_the_deletion_or_says_what_is_wrong() -> None:
    access = Access(TOKEN.encode())
    body = json.dumps({"type": "orders", "where": "x = 1", "reason": "r"}).encode()
    done = answer_tables_delete(access, deleter({"rows": 2}), "/tables/delete", AUTH, "10.0.0.7", body)
    assert done.code == 200 and json.loads(done.body) == {"rows": 2, "caller": "10.0.0.7"}
    assert answer_tables_delete(access, deleter({}), "/tables/delete", AUTH, "c", b"[1]").code == 400
    assert answer_tables_delete(access, deleter({}), "/tables/delete", AUTH, "c", b"{nope").code == 400
    bad = answer_tables_delete(access, deleter(ConfigError('"reason": why')), "/tables/delete", AUTH, "c", body)
    assert bad.code == 400 and b'"reason"' in bad.body
    refused = answer_tables_delete(access, deleter(PurgeError("no column x")), "/tables/delete", AUTH, "c", body)
    assert refused.code == 422 and b"no column x" in refused.body
