"""Channel options shared by every gRPC peer of the service: the server, its client, the adapters."""

from __future__ import annotations

# Inventories of large clusters outgrow gRPC's 4 MiB default message size.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)
