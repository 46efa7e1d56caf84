"""Django settings, driven by the typed environment config (receipt_site.config)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import django
from django.core.exceptions import ImproperlyConfigured

from receipt_site import config as _config
from receipt_site.conf import q_cluster, with_directories
from receipt_site.databases import database_from_url

# The site's own templates ship inside the package, so an installed Receipt has them too.
PACKAGE_DIR = Path(__file__).resolve().parent

try:
    RECEIPT = with_directories(
        _config.load(os.environ),
        base=Path.cwd(),
        names=("RECEIPT_DATA_DIR", "RECEIPT_WORKSPACE_DIR"),
    )
except _config.ConfigError as error:  # stop startup with the variable named (SPEC 13)
    raise ImproperlyConfigured(str(error)) from None

DATA_DIR = Path(RECEIPT.data_dir)
DATA_DIR.mkdir(parents=True, exist_ok=True)
WORKSPACE_DIR = Path(str(RECEIPT.workspace_dir))


def _secret_key() -> str:
    if RECEIPT.secret_key:
        return RECEIPT.secret_key
    # Embedded default: one random key per data dir, kept beside the database (0600).
    path = DATA_DIR / "secret.key"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = RECEIPT.debug
ALLOWED_HOSTS = list(RECEIPT.allowed_hosts)

INSTALLED_APPS = [
    "receipt_site.admin_site.ReceiptAdminConfig",  # django.contrib.admin, our site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "receipt_site",  # above django_q, as in a host project: its qcluster refusal wins
    "django_q",
    *(["django_tasks"] if django.VERSION < (6, 0) else []),  # the task framework's backport
    "receipts",
    "access",
    "jobs",
    "objectives",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "receipt_site.static_files.StaticFilesMiddleware",  # WhiteNoise, async-capable (T-2)
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # last, so the first to see a view's exception: a database outage becomes a 503 (C-8)
    "receipt_site.api_errors.DatabaseOutageMiddleware",
]

ROOT_URLCONF = "receipt_site.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # before the apps' own: the site's admin index and error pages (the apps' pages
        # ship in their own templates/, which is all a host project needs)
        "DIRS": [PACKAGE_DIR / "site_templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
WSGI_APPLICATION = "receipt_site.wsgi.application"
ASGI_APPLICATION = "receipt_site.asgi.application"

DATABASES = {
    "default": database_from_url(
        RECEIPT.database_url, data_dir=DATA_DIR, pool=os.environ.get("RECEIPT_DB_POOL") == "1"
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = DATA_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)  # WhiteNoise warns on every request when it is missing
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True  # serve straight from the apps too when collectstatic was not run

DATA_UPLOAD_MAX_MEMORY_SIZE = RECEIPT.max_payload_bytes + 64 * 1024

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "observability.logs.JsonFormatter"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json"}},
    "root": {"handlers": ["stderr"], "level": RECEIPT.log_level},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "django_q": {"level": "WARNING"},
        "django-q": {"level": "WARNING"},
    },
}

# django-q2: one cluster per role, built from the config (jobs/runtime/roles.py says why).
Q_CLUSTER = q_cluster(RECEIPT)

# Django's task framework: every `@task` enqueue is a Receipt job (docs/tasks.md).
TASKS = {"default": {"BACKEND": "jobs.tasks.ReceiptBackend"}}

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": ["access.authentication.PrincipalAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["access.permissions.HasScope"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "receipt_site.api_errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
    "UNAUTHENTICATED_TOKEN": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Receipt API",
    "DESCRIPTION": (
        "Durable jobs on hash-chained receipts. Every endpoint but /healthz and /readyz "
        "needs `Authorization: Bearer <token>` (or a staff admin session). Errors are "
        '`{"ok": false, "error": "<code>", "detail": "<sentence>"}`. Guide: docs/api.md.'
    ),
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["access.permissions.IsPrincipal"],  # only health is open
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "JobStatusEnum": "jobs.core.vocabulary.STATUSES",
        "LaneEnum": "jobs.core.vocabulary.LANES",
        "SingletonModeEnum": "jobs.core.vocabulary.SINGLETON_MODES",
        "KindEnum": "jobs.core.contracts.KINDS",
        "WorkerGroupEnum": "jobs.core.contracts.WORKER_GROUPS",
    },
    # the plain Django views (live events, wait, health, metrics) join the schema here
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "jobs.api.plain_views_schema.add_plain_views",
    ],
    "SWAGGER_UI_DIST": "SIDECAR",  # A-11, P-5: assets from drf_spectacular_sidecar, no CDN
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "SWAGGER_UI_SETTINGS": {"persistAuthorization": False, "displayOperationId": True},
    "REDOC_DIST": "SIDECAR",
}

LOGIN_URL = "/admin/login/"
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
X_FRAME_OPTIONS = "DENY"
