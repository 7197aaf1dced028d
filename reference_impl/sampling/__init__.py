"""Bit-exact block and tuple selection of TABLESAMPLE and ANALYZE.

Which blocks a sample scan or ANALYZE reads is decided by a little arithmetic that
PostgreSQL spreads over seven files: a Jenkins hash (``src/common/hashfn.c``), the
float8-to-seed conversion of ``REPEATABLE`` (``hashfloat8``), the xoroshiro128**
generator (``src/common/pg_prng.c``), the four sampling methods (``system.c``,
``bernoulli.c``, ``tsm_system_rows.c``, ``tsm_system_time.c``) and the block
sampler and reservoir of ``src/backend/utils/misc/sampling.c``.  This package
reproduces all of it bit for bit, so that a scan model can ask "which block
next?" and get the answer a PostgreSQL 18 server gives for the same seed.

How the pieces relate::

    REPEATABLE(x) --hashfloat8--> seed (uint32) <--pg_prng_uint32-- global PRNG
                                    |
         +--------------------------+---------------------------+
         |                          |                           |
    SYSTEM / BERNOULLI        SYSTEM_ROWS / SYSTEM_TIME      ANALYZE
    hash([block, seed])       PgPrng(seed): firstblock,      BlockSampler(seed):
    hash([blk, off, seed])    step coprime with nblocks      Knuth's algorithm S,
    below a cutoff from       -> StrideSampler               ascending blocks;
    the percentage            (first + k*step mod N)         ReservoirState (rows)
    (tablesample.py)          (stride.py)                    (analyze.py)

    hashing.py: hash_bytes, hashfloat8      prng.py: pg_prng, sampler_prng
    common.py: SamplingError, InvalidBlockNumber, argument checks

Two design choices matter for speed.  The hash exists twice: over Python ints
(the readable oracle) and over numpy ``uint32`` arrays, whose wrap-around
arithmetic is C's, so SYSTEM decides 16,384 blocks per numpy step (small enough
to stay in the CPU cache) and yields them lazily (``system_sample_block_chunks``):
an 8,388,608-block relation takes about 0.2 s and a few megabytes.  And the block sampler's skip loop
hands long runs to ``numpy.cumprod``, a sequential product with C's doubles.

What PostgreSQL rejects with an error is rejected here with ``SamplingError`` (a
``ValueError``) naming the value and the allowed range.  Percentages are
``real`` in SQL: they are rounded to float32 before any test, so ``100.000001``
is accepted (it becomes 100) exactly as on the server.
"""

from .analyze import (
    BlockSampler,
    ReservoirState,
    RowReservoir,
    analyze_sample_blocks,
    analyze_targrows,
)
from .common import INVALID_BLOCK_NUMBER, MAX_OFFSET_NUMBER, SamplingError
from .hashing import (
    hash_block_offset_seed,
    hash_block_seed,
    hash_bytes_uint32,
    hashfloat8,
)
from .prng import PgPrng, sampler_prng
from .stride import (
    StrideSampler,
    SystemRowsSampler,
    SystemTimeSampler,
    random_relative_prime,
    stride_plan,
    stride_visit_order,
    system_rows_ntuples,
    system_time_millis,
)
from .tablesample import (
    SampleScanSwitches,
    bernoulli_cutoff,
    bernoulli_sample_tids,
    bernoulli_tuple_selected,
    percent_as_float4,
    sample_method_switches,
    system_block_selected,
    system_cutoff,
    system_sample_block_chunks,
    system_sample_blocks,
)

__all__ = [
    "INVALID_BLOCK_NUMBER",
    "MAX_OFFSET_NUMBER",
    "BlockSampler",
    "PgPrng",
    "ReservoirState",
    "RowReservoir",
    "SampleScanSwitches",
    "SamplingError",
    "StrideSampler",
    "SystemRowsSampler",
    "SystemTimeSampler",
    "analyze_sample_blocks",
    "analyze_targrows",
    "bernoulli_cutoff",
    "bernoulli_sample_tids",
    "bernoulli_tuple_selected",
    "hash_block_offset_seed",
    "hash_block_seed",
    "hash_bytes_uint32",
    "hashfloat8",
    "percent_as_float4",
    "random_relative_prime",
    "sample_method_switches",
    "sampler_prng",
    "stride_plan",
    "stride_visit_order",
    "system_block_selected",
    "system_cutoff",
    "system_rows_ntuples",
    "system_sample_block_chunks",
    "system_sample_blocks",
    "system_time_millis",
]
