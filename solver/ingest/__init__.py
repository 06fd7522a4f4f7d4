"""Readers of inventory and request formats a user already has: nvidia-smi output, JSON/YAML files."""
