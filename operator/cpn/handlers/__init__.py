"""kopf registrations. ``kopf run -m cpn.handlers`` (or ``cpn run``) registers them all."""

from cpn.handlers import lifecycle, members  # noqa: F401
