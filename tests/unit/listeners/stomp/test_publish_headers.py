"""What a maintenance command's SEND carries of a `user-id` header (`listeners/stomp/publish.py`):
RabbitMQ refuses another user's (tests/integration/test_rabbitmq_facts.py), so it travels as
`mqbridge-original-user-id`; one set aside by a move that is the login's own comes back."""

from __future__ import annotations

from mqbridge.listeners.stomp.publish import sendable_headers


def test_another_users_user_id_is_set_aside_and_the_logins_own_comes_back() -> None:
    assert sendable_headers({"user-id": "someone-else", "x": "1"}, "guest") == {
        "mqbridge-original-user-id": "someone-else", "x": "1"}
    assert sendable_headers({"user-id": "guest"}, "guest") == {"user-id": "guest"}
    assert sendable_headers({"mqbridge-original-user-id": "guest"}, "guest") == {"user-id": "guest"}
    assert sendable_headers({"mqbridge-original-user-id": "someone-else"}, "guest") == {
        "mqbridge-original-user-id": "someone-else"}
    # No login (a broker without one): any user-id is another user's
    assert sendable_headers({"user-id": "guest"}, None) == {"mqbridge-original-user-id": "guest"}
