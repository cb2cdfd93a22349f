"""kopf registrations. ``kopf run -m cpn.handlers`` (or ``cpn run``) registers them all."""

from cpn.handlers import aijobs, lifecycle, members  # noqa: F401
