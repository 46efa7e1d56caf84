"""`manage.py createtoken --name N [--org ORG] [--scopes ...]`: the secret is the last line."""

from django.apps import apps
from django.core.management.base import BaseCommand, CommandError

from access.models import ApiToken
from access.tokens import SCOPES

FACTORY_SCOPES = ("objectives:read", "factory:commands")


class Command(BaseCommand):
    help = "Create an API token. The token is printed once, alone on the last line."

    def add_arguments(self, parser):
        parser.add_argument("--name", required=True)
        parser.add_argument("--org", default=None, help="bind the token to one organization id")
        parser.add_argument(
            "--scopes",
            nargs="*",
            default=None,
            help="jobs:write jobs:read jobs:control objectives:read factory:commands (default all, "
            "the last two only where Factory is installed; factory:commands lets payloads "
            "carry shell commands)",
        )

    def handle(self, *args, name, org, scopes, **options):
        if not name.strip():
            raise CommandError("--name must not be empty")
        if not scopes and not apps.is_installed("objectives"):  # no Factory to give access to
            scopes = [scope for scope in SCOPES if scope not in FACTORY_SCOPES]
        try:
            token, secret = ApiToken.issue(name=name.strip(), organization_id=org, scopes=scopes)
        except ValueError as error:
            raise CommandError(str(error)) from None
        scope_text = ",".join(token.scopes)
        org_text = token.organization_id or "any organization"
        self.stdout.write(f"created token '{token.name}' (scopes {scope_text}; {org_text})")
        self.stdout.write(secret)
