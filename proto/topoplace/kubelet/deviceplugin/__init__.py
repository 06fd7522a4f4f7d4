"""Generated from the kubelet's device-plugin API (see api.proto)."""
