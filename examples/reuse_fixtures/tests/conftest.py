"""Fixture variants for this project, made with the plugin's factories."""

from pytest_readstream import factories

# A second, HDD-backed instance with a sync I/O method, and a large table in it.
hdd_instance = factories.readstream_instance_factory(storage="hdd", settings={"io_method": "sync"})
orders = factories.readstream_relation_factory("bulk", instance="hdd_instance", name="orders")
