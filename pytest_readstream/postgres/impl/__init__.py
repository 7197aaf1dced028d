"""The server as an implementation under test (``--readstream-impl=postgres``): the
implementation object (``implementation``), its stream driven through the probe
(``remote_stream``), the relations it builds page for page (``relbuild``) and the scans it runs
as SQL (``scanops``)."""
