"""The benchmark machinery behind ``readstream bench`` and the checkout's ``bench/`` scripts.

* :mod:`~pytest_readstream.bench.tables` — the seed threads' published tables, row by row;
* :mod:`~pytest_readstream.bench.runs` — one simulated run of a table row on the model;
* :mod:`~pytest_readstream.bench.calibration` — device and CPU calibration per thread;
* :mod:`~pytest_readstream.bench.seeds` — ``readstream bench seeds``: all tables, checks, report;
* :mod:`~pytest_readstream.bench.model` — ``readstream bench model``: the model's own speed;
* :mod:`~pytest_readstream.bench.readahead` — the kernel read-ahead evaluation;
* :mod:`~pytest_readstream.bench.plots` — matplotlib figures for traces and seed tables.

Each module prints ratios measured in one run; none is imported by the pytest plugin.
"""
