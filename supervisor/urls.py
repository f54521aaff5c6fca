"""Operator console URLs (/ops/)."""

urlpatterns: list = []
