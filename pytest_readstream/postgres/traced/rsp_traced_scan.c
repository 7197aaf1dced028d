/*
 * rsp_traced_scan.c: run one whole stream through the traced copy of a build's read_stream.c
 * and return the stream's own StartReadBuffers / WaitReadBuffers calls.
 *
 * Part of pytest-readstream (not PostgreSQL). Built by traced_scan.py together with the
 * generated rsprobe_traced_copy.c, loaded with CREATE FUNCTION ... LANGUAGE C. It is what
 * "readstream compare" runs on each side when a side has a traced copy: a block-range stream
 * over a relation (the build's own block_range_read_stream_cb), every buffer released as soon
 * as it is returned, as a plain sequential consumer does.
 *
 * rsp_traced_scan(rel regclass, first int8, nblocks int8, flags int4, bulkread bool)
 *   RETURNS TABLE (kind text, blocknum int8, asked int4, accepted int4, forwarded int4,
 *                  additional_pin_limit int4, flags int4, must_wait bool)
 *
 * The consumer side is checked here, because a broken stream must be reported, not believed:
 * every returned buffer must hold the next block of the range, and the stream must return the
 * whole range; otherwise the function raises an ERROR saying which block went wrong.
 */
#include "postgres.h"

#include "access/relation.h"
#include "fmgr.h"
#include "funcapi.h"
#include "storage/bufmgr.h"
#include "storage/read_stream.h"
#include "utils/builtins.h"
#include "utils/rel.h"

#include "rsprobe_trace.h"
#include "rsprobe_traced.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(rsp_traced_scan);

Datum
rsp_traced_scan(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	int64		first = PG_GETARG_INT64(1);
	int64		nblocks = PG_GETARG_INT64(2);
	int32		flags = PG_GETARG_INT32(3);
	bool		bulkread = PG_GETARG_BOOL(4);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	BufferAccessStrategy strategy = NULL;
	BlockRangeReadStreamPrivate range;
	Relation	rel;
	ReadStream *stream;
	Buffer		buf;
	int64		returned = 0;
	int			n;
	const RspTraceEvent *ev;

	if (first < 0 || nblocks < 0 || first + nblocks > (int64) MaxBlockNumber)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("block range %lld+%lld is out of range",
						(long long) first, (long long) nblocks)));

	InitMaterializedSRF(fcinfo, 0);
	rel = relation_open(relid, AccessShareLock);
	if (bulkread)
		strategy = GetAccessStrategy(BAS_BULKREAD);
	range.current_blocknum = (BlockNumber) first;
	range.last_exclusive = (BlockNumber) (first + nblocks);

	rsp_trace_clear();
	stream = rsp_traced_read_stream_begin_relation(flags, strategy, rel, MAIN_FORKNUM,
												   rsp_traced_block_range_read_stream_cb,
												   &range, 0);
	while ((buf = rsp_traced_read_stream_next_buffer(stream, NULL)) != InvalidBuffer)
	{
		BlockNumber got = BufferGetBlockNumber(buf);

		ReleaseBuffer(buf);
		if (returned >= nblocks)
			ereport(ERROR,
					(errmsg("the stream returned block %u after the last block %lld of the range",
							got, (long long) (first + nblocks - 1))));
		if ((int64) got != first + returned)
			ereport(ERROR,
					(errmsg("the stream returned block %u where block %lld was due",
							got, (long long) (first + returned))));
		returned++;
	}
	rsp_traced_read_stream_end(stream);
	if (returned != nblocks)
		ereport(ERROR,
				(errmsg("the stream ended after %lld of %lld blocks",
						(long long) returned, (long long) nblocks)));
	if (strategy != NULL)
		FreeAccessStrategy(strategy);
	relation_close(rel, AccessShareLock);

	n = rsp_trace_count();
	ev = rsp_trace_events();
	for (int i = 0; i < n; i++)
	{
		Datum		values[8];
		bool		nulls[8] = {0};

		values[0] = CStringGetTextDatum(ev[i].kind == RSP_EV_START ? "start" : "wait");
		values[1] = Int64GetDatum((int64) ev[i].blocknum);
		values[2] = Int32GetDatum(ev[i].nblocks_asked);
		values[3] = Int32GetDatum(ev[i].nblocks_accepted);
		values[4] = Int32GetDatum(ev[i].forwarded);
		values[5] = Int32GetDatum(ev[i].additional_pin_limit);
		values[6] = Int32GetDatum(ev[i].flags);
		values[7] = BoolGetDatum(ev[i].must_wait);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	rsp_trace_clear();
	return (Datum) 0;
}
