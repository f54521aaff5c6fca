"""REST API URLs (version 1 under /api/v1/)."""

urlpatterns: list = []
