"""Facts from the network: an image's configuration read from its registry (SPEC §4 step 6).

I/O like webhook.sources, in a package of its own so its import contract can allow aiohttp
(the HTTP client) while sources keep to the kubernetes client: layers cli → admission →
sources | tls | registry → core. Nothing here imports the admission edge; the handler and the
CLI hand what it finds to the pure evaluation as `evaluate(..., images=...)`.
"""
