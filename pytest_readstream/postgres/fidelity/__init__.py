"""The model held against a server: the oracle and its scenarios (``oracle``, ``scenarios``),
golden facts (``facts``), timing under real latencies (``timing``, ``seed_timing``) and two builds
side by side (``compare``)."""
