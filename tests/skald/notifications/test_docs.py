"""docs/notifications.md's receiver example runs as written against what Skald signs."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from standardwebhooks import Webhook

from skald.notifications.send import signed_headers

DOC = Path(__file__).resolve().parents[3] / "docs" / "notifications.md"


def test_the_documented_receiver_verifies_a_signed_message_and_drops_its_retry():
    (code,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    secret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    namespace: dict = {}
    exec(code.replace('SECRET = "whsec_..."', f"SECRET = {secret!r}"), namespace)
    subscription = SimpleNamespace(secret=secret, previous_secret="", previous_secret_until=None)
    body = b'{"type":"approval.pending","summary":"write_file asks for approval","link":"https://x/"}'
    headers = signed_headers(subscription, "msg_1", body)  # type: ignore[arg-type]
    assert namespace["receive"](body, headers) == 204
    assert namespace["receive"](body, headers) == 204 and namespace["seen"] == {"msg_1"}
    assert namespace["receive"](body + b" ", headers) == 401
    Webhook(secret).verify(body, headers)
