"""The confined process that runs one script step (``python -m sandbox``).

Everything imported here is loaded before lockdown and runs beside untrusted code: keep it
small. Heavy imports belong to the modules that need them, not to this package.
"""
