/*
 * rsinterpose.h: the control area shared by the harness and every process of a server started
 * with the read interposer preloaded (pytest-readstream).
 *
 * The harness creates a file of sizeof(RsiControl) bytes in the server's run directory and
 * names it in READSTREAM_INTERPOSE_CONTROL; the library maps it MAP_SHARED in the postmaster
 * (a constructor), so every backend and I/O worker the postmaster forks shares the mapping.
 * The Python side (faults.py) mirrors this layout with ctypes; RSI_VERSION changes with it.
 *
 * Rules are rewritten only by the harness, between statements, under a sequence lock (odd
 * while writing); counters and the ledger are written by the server's processes with atomics.
 */
#ifndef RSINTERPOSE_H
#define RSINTERPOSE_H

#include <stdint.h>

#define RSI_MAGIC 0x50495352u /* "RSIP" little-endian */
#define RSI_VERSION 1u
#define RSI_MAX_RULES 16
#define RSI_MAX_FILES 8
#define RSI_LEDGER_CAP 8192

/* What a rule does to a read it fires on (besides its delay, which every rule may add). */
enum RsiAction
{
	RSI_DELAY = 0,				/* only the delay */
	RSI_EIO = 1,				/* fail the whole request with EIO */
	RSI_SHORT = 2,				/* transfer less than asked */
	RSI_HANG = 3,				/* block until the harness releases the rule */
	RSI_CORRUPT = 4,			/* read, then damage each returned page of the rule's blocks so
								 * that page verification fails on its checksum */
	RSI_HANG_EIO = 5			/* block until released, then fail with EIO (a foreign I/O
								 * that fails) */
};

/* How each fired read's latency is drawn. */
enum RsiDist
{
	RSI_FIXED = 0,				/* latency_ns */
	RSI_UNIFORM = 1,			/* uniform in [latency_ns, latency_b_ns] */
	RSI_EXPONENTIAL = 2			/* exponential with mean latency_ns */
};

/* One segment file of a relation fork, identified by device and inode (never by name). */
typedef struct RsiFile
{
	uint64_t	dev;
	uint64_t	ino;
	uint32_t	first_block;	/* relation block number of the segment's first block */
	uint32_t	pad;
} RsiFile;

typedef struct RsiRule
{
	/* written by the harness */
	uint32_t	active;
	uint32_t	action;			/* RsiAction */
	uint32_t	nfiles;
	uint32_t	first_block;	/* block range the rule matches, inclusive */
	uint32_t	last_block;
	uint32_t	nth;			/* fire only on the nth matching request (1-based); 0: on each */
	uint32_t	times;			/* fire at most this often; 0: unlimited */
	uint32_t	short_bytes;	/* RSI_SHORT on a request that starts at the faulty block
								 * (0: wait for a request that starts before it) */
	uint32_t	dist;			/* RsiDist */
	uint32_t	max_inflight;	/* requests of this rule served at once; 0: unlimited */
	uint64_t	latency_ns;
	uint64_t	latency_b_ns;
	uint64_t	ps_per_byte;	/* transfer cost, picoseconds per byte */
	uint64_t	seed;
	RsiFile		files[RSI_MAX_FILES];
	/* written by the server's processes (atomics); zeroed by the harness with the rule */
	uint64_t	matched;
	uint64_t	fired;
	uint64_t	draws;
	uint32_t	inflight;
	uint32_t	released;		/* set by the harness: hung requests return, no new hang */
} RsiRule;

/* One request a rule matched. seq is stored last (index + 1): 0 means not yet complete. */
typedef struct RsiEntry
{
	uint64_t	seq;
	int32_t		pid;
	int32_t		rule;
	uint32_t	action;			/* RsiAction applied; RSI_DELAY when the rule did not fire */
	uint32_t	fired;
	uint32_t	first_block;
	uint32_t	nblocks;
	int64_t		result;			/* bytes returned, or -errno */
	uint64_t	asked;			/* bytes asked */
	uint64_t	delay_ns;
	uint64_t	start_ns;		/* CLOCK_MONOTONIC */
	uint64_t	end_ns;
} RsiEntry;

typedef struct RsiControl
{
	uint32_t	magic;
	uint32_t	version;
	uint64_t	seq;			/* sequence lock over the rules: odd while the harness writes */
	uint32_t	enabled;		/* 0: every read passes straight through */
	uint32_t	blcksz;
	uint32_t	nrules;
	uint32_t	ledger_cap;
	int32_t		attached_pid;	/* the first process that mapped the area (the postmaster) */
	uint32_t	pad0;
	uint64_t	ledger_next;	/* entries ever claimed (atomic) */
	uint64_t	seen;			/* requests intercepted while enabled */
	uint64_t	matched;		/* requests at least one rule matched */
	RsiRule		rules[RSI_MAX_RULES];
	RsiEntry	ledger[RSI_LEDGER_CAP];
} RsiControl;

#endif							/* RSINTERPOSE_H */
