"""The admission edge: AdmissionReview wire format, the aiohttp app, metrics, logs, shutdown.

The only package that imports `aiohttp`. It may import the core, the sources and TLS.
"""
