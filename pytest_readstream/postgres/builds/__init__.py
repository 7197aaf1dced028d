"""C builds against a server: the compiler and the server's headers (``_cbuild``), the probe
extension (``probe_build``), the traced copy of the tree's own ``read_stream.c``
(``traced_copy``) and its C mutants (``cmutants``), the traced-scan driver of ``compare``
(``traced_scan``), PostgreSQL source trees (``pgsource``) and whole server builds: of a
fetched release (``pgbuild``) and of a developer's own tree, cached by its content (``pgtree``). The shipped C sources live in ``probe/`` and ``traced/``."""
