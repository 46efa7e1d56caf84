"""A host project's URLconf that forgot Receipt's include (receipt.E002)."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
