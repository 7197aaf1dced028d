"""Starting and reaching servers: clusters the harness runs (``_cluster``, ``server``), the
processes and users they run as (``_process``, ``_install``, ``_cleanup``), connections and their
settings (``session``, ``settings``), scratch databases (``scratch``) and what a measured
statement read (``observe``)."""
