"""A minimal Faust worker for ``test_commit_gate.py``: one table write per message, with the
producer buffer's hand-on to the Kafka client slowed down (as on a busy event loop).

    python commit_gate_app.py BOOTSTRAP TOPIC APP_ID gated|plain DELAY_S
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import faust
from faust.transport.producer import ProducerBuffer

from streams.transport import install_worker_transport

bootstrap, topic, app_id, mode, delay = sys.argv[1:6]

_send = ProducerBuffer._send_pending


async def _slow_send(self: ProducerBuffer, fut: Any) -> None:
    await asyncio.sleep(float(delay))
    await _send(self, fut)

ProducerBuffer._send_pending = _slow_send  # type: ignore[method-assign]

app = faust.App(app_id, broker=f"kafka://{bootstrap}", store="memory://",
                topic_partitions=1, topic_replication_factor=1,
                broker_commit_interval=0.5, web_enabled=False)
if mode == "gated":
    install_worker_transport(app)
source = app.topic(topic, value_type=bytes, value_serializer="raw", partitions=1)
seen = app.Table("seen", default=int, partitions=1)


@app.agent(source)
async def count(stream: Any) -> None:
    async for value in stream:
        seen[value.decode()] = 1


if __name__ == "__main__":
    sys.argv = [sys.argv[0], "worker", "-l", "warn"]
    app.main()
