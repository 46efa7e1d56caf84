from django.urls import path  # noqa: F401

urlpatterns: list = []  # filled by live events (SPEC 10)
