"""TLS material: CA and serving certificates, the server's SSL context and its reload.

The only package that imports `cryptography`.
"""
