"""Routes of the objectives API (A-9), mounted under /factory/api/."""

from django.urls import path

from objectives.api import views

urlpatterns = [
    path("objectives", views.ObjectiveListView.as_view(), name="objective-list"),
    path(
        "objectives/<str:objective_id>",
        views.ObjectiveDetailView.as_view(),
        name="objective-detail",
    ),
    path(
        "objectives/<str:objective_id>/receipts",
        views.ObjectiveReceiptsView.as_view(),
        name="objective-receipts",
    ),
    path(
        "objectives/<str:objective_id>/live-status",
        views.ObjectiveLiveStatusView.as_view(),
        name="objective-live-status",
    ),
]
