/*
 * rsp_traced_scan.c: run one block-range stream through the traced copy of a build's
 * read_stream.c and return the stream's own StartReadBuffers / WaitReadBuffers calls.
 *
 * Part of pytest-readstream (not PostgreSQL). Built by traced_scan.py together with the
 * generated rsprobe_traced_copy.c, loaded with CREATE FUNCTION ... LANGUAGE C. It is what
 * "readstream compare" runs on a side that has a traced copy: a stream over a block range with
 * the build's own block_range_read_stream_cb, consumed as a plain sequential consumer does.
 *
 * rsp_traced_scan(rel regclass, first int8, nblocks int8, flags int4, bulkread bool,
 *                 hold int4, stop_after int8, reset_after int8)
 *   RETURNS TABLE (kind text, blocknum int8, asked int4, accepted int4, forwarded int4,
 *                  additional_pin_limit int4, flags int4, must_wait bool, returned int4)
 *
 * returned: what the call returned where it returns something (StartReadBuffers' bool; on 19+
 * also WaitReadBuffers' "needed to wait"), else NULL.
 *
 * hold: the consumer keeps the last "hold" returned buffers pinned (pins held elsewhere shrink
 * the stream's budget). stop_after >= 0: end the stream after that many buffers (end must
 * complete and release what was read ahead). reset_after >= 0: reset the stream after that many
 * buffers, point the range at the next block due, and go on to the end.
 *
 * The consumer side is checked here, because a broken stream must be reported, not believed:
 * every returned buffer must be valid and hold the next block due; the stream must return the
 * whole range (or up to stop_after); and after read_stream_end no buffer of the relation may
 * stay pinned. A violation raises an ERROR saying what went wrong.
 */
#include "postgres.h"

#include "access/relation.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/read_stream.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/tuplestore.h"

#include "rsprobe_bufstate.h"
#include "rsprobe_trace.h"
#include "rsprobe_traced.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(rsp_traced_scan);

/* Buffers of the relation's main fork with a non-zero shared refcount. */
static int
rsp_pinned_buffers(Relation rel)
{
	int			pinned = 0;

	for (int i = 0; i < NBuffers; i++)
	{
		BufferDesc *desc = GetBufferDescriptor(i);
		uint64		state = RSP_BUF_STATE(desc);

		if (RSP_BUF_REFCOUNT(state) > 0 &&
			BufTagMatchesRelFileLocator(&desc->tag, &rel->rd_locator) &&
			BufTagGetForkNum(&desc->tag) == MAIN_FORKNUM)
			pinned++;
	}
	return pinned;
}

/* Check a buffer the stream returned: valid, and the block that was due. */
static void
rsp_check_returned(Buffer buf, int64 due)
{
	BlockNumber got = BufferGetBlockNumber(buf);
	BufferDesc *desc = GetBufferDescriptor(buf - 1);

	if ((int64) got != due)
		ereport(ERROR,
				(errmsg("the stream returned block %u where block %lld was due",
						got, (long long) due)));
	if ((RSP_BUF_STATE(desc) & BM_VALID) == 0)
		ereport(ERROR,
				(errmsg("the stream returned block %u before its read completed (buffer not valid)",
						got)));
}

Datum
rsp_traced_scan(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	int64		first = PG_GETARG_INT64(1);
	int64		nblocks = PG_GETARG_INT64(2);
	int32		flags = PG_GETARG_INT32(3);
	bool		bulkread = PG_GETARG_BOOL(4);
	int32		hold = PG_GETARG_INT32(5);
	int64		stop_after = PG_GETARG_INT64(6);
	int64		reset_after = PG_GETARG_INT64(7);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	BufferAccessStrategy strategy = NULL;
	BlockRangeReadStreamPrivate range;
	Relation	rel;
	ReadStream *stream;
	Buffer		buf;
	Buffer	   *held;
	int64		returned = 0;
	int64		want;
	int			nheld = 0;
	int			pinned_before;
	int			pinned_after;
	int			n;
	const RspTraceEvent *ev;

	if (first < 0 || nblocks < 0 || first + nblocks > (int64) MaxBlockNumber)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("block range %lld+%lld is out of range",
						(long long) first, (long long) nblocks)));
	if (hold < 0 || hold > 10000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("hold = %d is out of range: allowed 0..10000", hold)));
	want = (stop_after >= 0 && stop_after < nblocks) ? stop_after : nblocks;

	InitMaterializedSRF(fcinfo, 0);
	rel = relation_open(relid, AccessShareLock);
	if (bulkread)
		strategy = GetAccessStrategy(BAS_BULKREAD);
	held = palloc0(sizeof(Buffer) * (hold + 1));
	range.current_blocknum = (BlockNumber) first;
	range.last_exclusive = (BlockNumber) (first + nblocks);
	pinned_before = rsp_pinned_buffers(rel);

	rsp_trace_clear();
	stream = rsp_traced_read_stream_begin_relation(flags, strategy, rel, MAIN_FORKNUM,
												   rsp_traced_block_range_read_stream_cb,
												   &range, 0);
	while (returned < want &&
		   (buf = rsp_traced_read_stream_next_buffer(stream, NULL)) != InvalidBuffer)
	{
		if (returned >= nblocks)
			ereport(ERROR,
					(errmsg("the stream returned block %u after the last block %lld of the range",
							BufferGetBlockNumber(buf), (long long) (first + nblocks - 1))));
		rsp_check_returned(buf, first + returned);
		returned++;
		/* The consumer holds the last "hold" buffers, releasing the oldest beyond that. */
		if (hold > 0)
		{
			if (nheld == hold)
			{
				ReleaseBuffer(held[0]);
				memmove(&held[0], &held[1], sizeof(Buffer) * (hold - 1));
				nheld--;
			}
			held[nheld++] = buf;
		}
		else
			ReleaseBuffer(buf);
		if (returned == reset_after)
		{
			rsp_traced_read_stream_reset(stream);
			/* What was read ahead is gone; continue with the next block due. */
			range.current_blocknum = (BlockNumber) (first + returned);
		}
	}
	rsp_traced_read_stream_end(stream);
	for (int i = 0; i < nheld; i++)
		ReleaseBuffer(held[i]);
	if (returned != want)
		ereport(ERROR,
				(errmsg("the stream ended after %lld of %lld blocks",
						(long long) returned, (long long) want)));
	pinned_after = rsp_pinned_buffers(rel);
	if (pinned_after > pinned_before)
		ereport(ERROR,
				(errmsg("%d buffers of the relation stayed pinned after read_stream_end",
						pinned_after - pinned_before)));
	if (strategy != NULL)
		FreeAccessStrategy(strategy);
	relation_close(rel, AccessShareLock);

	n = rsp_trace_count();
	ev = rsp_trace_events();
	for (int i = 0; i < n; i++)
	{
		Datum		values[9];
		bool		nulls[9] = {0};

		values[0] = CStringGetTextDatum(ev[i].kind == RSP_EV_START ? "start" : "wait");
		values[1] = Int64GetDatum((int64) ev[i].blocknum);
		values[2] = Int32GetDatum(ev[i].nblocks_asked);
		values[3] = Int32GetDatum(ev[i].nblocks_accepted);
		values[4] = Int32GetDatum(ev[i].forwarded);
		values[5] = Int32GetDatum(ev[i].additional_pin_limit);
		values[6] = Int32GetDatum(ev[i].flags);
		values[7] = BoolGetDatum(ev[i].must_wait);
		values[8] = Int32GetDatum(ev[i].result);
		nulls[8] = !ev[i].has_result;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	rsp_trace_clear();
	return (Datum) 0;
}
