"""The release builder: the packaged executable and the OCI image archives, without a container engine.

Runs from a source checkout with ``packaging/`` on the module path (``make binary``, ``make
image``, ``make images``; ``cdriver sim images`` runs it as a process). It is no part of the
installed package nor of the packaged executable: ``oci`` writes and reads OCI archives,
``containerfile`` realises the Containerfile's recipe, ``build`` caches the bundle and the
images by the content of their inputs.
"""
