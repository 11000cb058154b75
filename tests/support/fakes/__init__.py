"""Test doubles that simulate what cannot run here (an IBM MQ queue manager)."""
