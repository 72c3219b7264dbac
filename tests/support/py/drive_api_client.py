"""Drives the management API through a client generated from its OpenAPI
document (openapi-python-client), as a user of that client would.

    drive_api_client.py CLIENT_PARENT BASE_URL TOKEN STEP [RECEIVER_URL]

CLIENT_PARENT holds the generated package `client`. STEP is:
  create  add the webhook `orders` to RECEIVER_URL, read it, send it back
          as an update (accepted, nothing changes), and print "ok ..."
  retry   find the Failed delivery of `orders`, replay it, read it back
          with its attempts, and print "ok <id>"
Anything unexpected raises, with what the API said.
"""
import json
import sys

parent, base_url, token, step = sys.argv[1:5]
sys.path.insert(0, parent)

from client import AuthenticatedClient  # noqa: E402
from client.api.deliveries import get_delivery, list_deliveries, retry_delivery  # noqa: E402
from client.api.webhooks import create_webhook, get_webhook, update_webhook  # noqa: E402
from client.models import (  # noqa: E402
    Delivery,
    DeliveryPage,
    DeliveryStatus,
    Header,
    NewWebhook,
    Retried,
    RetryBody,
    UpdatedWebhook,
    Webhook,
    WebhookChange,
)

api = AuthenticatedClient(base_url=base_url, token=token, raise_on_unexpected_status=True)


def expect(answer, kind, what):
    if not isinstance(answer.parsed, kind):
        raise SystemExit(f"{what}: HTTP {answer.status_code}: {answer.content!r}")
    return answer.parsed


if step == "create":
    new = NewWebhook(
        name="orders",
        entity_type="Sales Order",
        event="on_submit",
        request_url=sys.argv[5],
        headers=[Header(key="X-Api-Key", value="do-not-show-me")],
        secret="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        rate_limit="50/s",
        timeout="5s",
    )
    created = expect(create_webhook.sync_detailed(client=api, body=new), Webhook, "create")
    assert created.signed and created.rate_limit == "50/s", created
    read = expect(get_webhook.sync_detailed("orders", client=api), Webhook, "read")
    # What was read, sent back as it is: accepted, and nothing changes.
    change = WebhookChange.from_dict(read.to_dict())
    updated = expect(
        update_webhook.sync_detailed("orders", client=api, body=change), UpdatedWebhook, "update"
    )
    assert not updated.rotation_started, updated
    again = expect(get_webhook.sync_detailed("orders", client=api), Webhook, "read again")
    assert again.to_dict() == read.to_dict(), (read.to_dict(), again.to_dict())
    print("ok", json.dumps(again.to_dict(), sort_keys=True))
elif step == "retry":
    page = expect(list_deliveries.sync_detailed(client=api, webhook="orders"), DeliveryPage, "list")
    failed = [d for d in page.deliveries if d.status == DeliveryStatus.FAILED]
    assert len(failed) == 1, [d.to_dict() for d in page.deliveries]
    retried = expect(retry_delivery.sync_detailed(failed[0].id, client=api, body=RetryBody()), Retried, "retry")
    assert retried.previous_status == DeliveryStatus.FAILED, retried
    shown = expect(get_delivery.sync_detailed(failed[0].id, client=api), Delivery, "show")
    assert shown.attempt_log and shown.attempt_log[0].response_code == 500, shown.to_dict()
    print("ok", failed[0].id)
else:
    raise SystemExit(f"unknown step {step!r}")
