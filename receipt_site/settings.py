"""Django settings, driven by the typed environment config (receipt_site.config)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from receipt_site import config as _config
from receipt_site.databases import database_from_url

BASE_DIR = Path(__file__).resolve().parent.parent

try:
    RECEIPT = _config.load(os.environ)
except _config.ConfigError as error:  # stop startup with the variable named (SPEC 13)
    raise ImproperlyConfigured(str(error)) from None

DATA_DIR = Path(RECEIPT.data_dir).resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)


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
    "django.contrib.admin",
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
    "django_q",
    "receipt_site",
    "receipts",
    "access",
    "jobs",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "receipt_site.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
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

DATABASES = {"default": database_from_url(RECEIPT.database_url, data_dir=DATA_DIR)}
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
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True  # serve straight from the apps too when collectstatic was not run

DATA_UPLOAD_MAX_MEMORY_SIZE = RECEIPT.max_payload_bytes + 64 * 1024

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "receipt_site.logs.JsonFormatter"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json"}},
    "root": {"handlers": ["stderr"], "level": RECEIPT.log_level},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "django_q": {"level": "WARNING"},
    },
}

# django-q2 (see ../shared/notes/django-q2.md): one signing name everywhere, failures acked
# (our receipts decide retries), no result storage (receipts are the record).
Q_CLUSTER = {
    "name": "receipt",
    "ack_failures": True,
    "workers": 1,
    "timeout": 60,
    "retry": 180,
    "queue_limit": 1,
    "bulk": 1,
    "max_attempts": 0,
    "save_limit": -1,
    "poll": 0.05,
    "catch_up": False,
    "scheduler": False,
    "orm": "default",
    "ALT_CLUSTERS": {},
}

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Receipt API",
    "VERSION": "0.1.0",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

LOGIN_URL = "/admin/login/"
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
X_FRAME_OPTIONS = "DENY"
