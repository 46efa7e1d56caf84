from django.urls import path  # noqa: F401

urlpatterns: list = []  # filled by the HTTP API (SPEC 9)
