/*
 * rsprobe.c: drive a server's ReadStream (src/backend/storage/aio/read_stream.c) one call at a
 * time over SQL, for pytest-readstream's conformance suite.
 *
 * A stream is begun on a relation with a callback that hands out the blocks the harness planned
 * (rsp_begin, rsp_plan): when the plan runs dry the callback returns InvalidBlockNumber, and
 * blocks planned later continue after a reset, as the harness's own callback does.  Given a
 * block range instead, the server's own block_range_read_stream_cb hands it out.  Streams stay
 * open across the statements of one transaction (by id): their memory lives in
 * TopTransactionContext and their pins and relation references in TopTransactionResourceOwner,
 * so that the end of one statement (its portal's resource owner) does not release them.  An
 * abort releases everything; the streams are forgotten at the end of the transaction.
 *
 * Every function returns one JSON object describing what the call did and what the buffer
 * manager shows afterwards: the buffer returned, its block and validity, whether its page is all
 * zeroes, the per-buffer data,
 * the blocks the callback produced during the call, GetPinLimit() and GetAdditionalPinLimit(),
 * shared blocks read and hit during the call (pgBufferUsage), the relation's pinned buffers as
 * the shared descriptors show them, the buffers the probe holds for the consumer, the stream's
 * own state where its layout is verified (below), and, when built against the traced copy
 * (-DRSPROBE_TRACED), every StartReadBuffers/WaitReadBuffers the stream made during the call.
 *
 * struct ReadStream is private to read_stream.c.  The probe reads it only when it is built with
 * the traced copy (-DRSPROBE_TRACED): the copy is compiled from the server's own read_stream.c,
 * and the builder generates inside it an accessor, rsp_traced_stream_json(), that writes the
 * struct's fields under the names that version declares (18: distance; 19+: readahead_distance,
 * combine_distance, distance_decay_holdoff, resume_*), after a run-time sanity check (our
 * callback and private pointer, the per-buffer data size, queue_size = max_pinned_buffers + 1,
 * indexes inside their bounds).  The struct is the server's too, so the accessor reads the
 * server's own streams (rsp_begin's "own") as well.  Untraced, the stream's state is unknown.
 *
 * Where the server's read_stream.c defines read_stream_pause() and read_stream_resume() (19+),
 * the callback pauses the stream at the positions the harness planned (rsp_pause_at), and
 * rsp_resume resumes it.
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/instrument.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/smgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/resowner.h"

#include "rsprobe_bufstate.h"
#include "rsprobe_stream.h"
#ifdef RSPROBE_TRACED
#include "rsprobe_trace.h"
#endif

PG_MODULE_MAGIC;

#define RSP_MAX_STREAMS 64

/* What the probe keeps of one stream (TopTransactionContext). */
typedef struct RspStream
{
	int			id;
	Oid			relid;
	Relation	rel;
	ForkNumber	fork;
	ReadStream *stream;
	BufferAccessStrategy strategy;
	size_t		pbd_size;
	BlockNumber *plan;
	int			nplan;
	int			plan_cap;
	int			pos;			/* next plan entry the callback hands out */
	int64		produced;		/* blocks handed out so far (the per-buffer data) */
	bool		use_range;		/* hand out range through the server's block_range_read_stream_cb */
	BlockRangeReadStreamPrivate range;
	int64	   *pauses;			/* positions (blocks produced) at which the callback pauses */
	int			npauses;
	int			pause_cap;
	bool		own;			/* the server's own read_stream.c, not the traced copy */
	bool		ended;
} RspStream;

static RspStream *rsp_streams[RSP_MAX_STREAMS];
static int	rsp_next_id = 1;

/* Buffers the probe pins for the consumer (kept buffers, rsp_pin); TopMemoryContext. */
static Buffer *rsp_held;
static int	rsp_nheld;
static int	rsp_held_cap;

/* Blocks the callback produced during the current SQL call (-1: InvalidBlockNumber). */
static int64 *rsp_cblog;
static int	rsp_ncblog;
static int	rsp_cblog_cap;

static int64 rsp_read_before;
static int64 rsp_hit_before;
static bool rsp_callback_registered;

PG_FUNCTION_INFO_V1(rsp_info);
PG_FUNCTION_INFO_V1(rsp_begin);
PG_FUNCTION_INFO_V1(rsp_plan);
PG_FUNCTION_INFO_V1(rsp_next);
PG_FUNCTION_INFO_V1(rsp_reset);
PG_FUNCTION_INFO_V1(rsp_end);
PG_FUNCTION_INFO_V1(rsp_pin);
PG_FUNCTION_INFO_V1(rsp_release);
PG_FUNCTION_INFO_V1(rsp_state);
PG_FUNCTION_INFO_V1(rsp_extend);
PG_FUNCTION_INFO_V1(rsp_pins);
PG_FUNCTION_INFO_V1(rsp_pause_at);
PG_FUNCTION_INFO_V1(rsp_resume);
PG_FUNCTION_INFO_V1(rsp_force_pin_limit);

/* The end of a transaction frees the streams' memory and drops their pins: forget them. */
static void
rsp_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
	{
		memset(rsp_streams, 0, sizeof(rsp_streams));
		rsp_nheld = 0;
#ifdef RSPROBE_TRACED
		/* A chosen pin limit lasts one test (one transaction). */
		rsp_trace_force_pin_limit(-1);
#endif
	}
}

static void
rsp_setup(void)
{
	if (!rsp_callback_registered)
	{
		RegisterXactCallback(rsp_xact_callback, NULL);
		rsp_callback_registered = true;
	}
	if (!IsTransactionBlock())
		ereport(ERROR,
				(errmsg("rsprobe: streams live in one transaction; call BEGIN first")));
	rsp_ncblog = 0;
	rsp_read_before = pgBufferUsage.shared_blks_read;
	rsp_hit_before = pgBufferUsage.shared_blks_hit;
#ifdef RSPROBE_TRACED
	rsp_trace_clear();
#endif
}

/*
 * Room for one more element in a growable array: doubles its capacity from ``initial`` when it is
 * full. A new array is allocated in ``context``; repalloc keeps an existing one in its own.
 */
static void *
rsp_reserve(void *array, int used, int *cap, Size elsize, int initial, MemoryContext context)
{
	int			newcap;

	if (used < *cap)
		return array;
	newcap = *cap ? *cap * 2 : initial;
	array = array ? repalloc(array, elsize * newcap) : MemoryContextAlloc(context, elsize * newcap);
	*cap = newcap;
	return array;
}

static void
rsp_cblog_add(int64 v)
{
	rsp_cblog = rsp_reserve(rsp_cblog, rsp_ncblog, &rsp_cblog_cap, sizeof(int64), 256, TopMemoryContext);
	rsp_cblog[rsp_ncblog++] = v;
}

static void
rsp_held_add(Buffer b)
{
	rsp_held = rsp_reserve(rsp_held, rsp_nheld, &rsp_held_cap, sizeof(Buffer), 64, TopMemoryContext);
	rsp_held[rsp_nheld++] = b;
}

/* The stream's callback: the next planned block, or the end when the plan has run dry. */
static BlockNumber
rsp_callback(ReadStream *stream, void *private_data, void *per_buffer_data)
{
	RspStream  *st = (RspStream *) private_data;
	BlockNumber b;

	for (int i = 0; i < st->npauses; i++)
		if (st->pauses[i] == st->produced)
		{
			/* Paused here once: the position is used up, as the harness's callback does. */
			st->pauses[i] = st->pauses[--st->npauses];
			rsp_cblog_add(-2);
#if RSP_HAVE_PAUSE
			return st->own ? read_stream_pause(stream) : RSP_PAUSE(stream);
#else
			ereport(ERROR, (errmsg("rsprobe: this server's read_stream.c has no read_stream_pause()")));
#endif
		}
	if (st->use_range)
	{
		/* The server's own callback decides; the probe only records what it handed out. */
		b = st->own ? block_range_read_stream_cb(stream, &st->range, NULL)
			: RSP_BLOCK_RANGE_CB(stream, &st->range, NULL);
		if (b == InvalidBlockNumber)
		{
			rsp_cblog_add(-1);
			return InvalidBlockNumber;
		}
		if (per_buffer_data != NULL)
			memcpy(per_buffer_data, &st->produced, sizeof(int64));
		st->produced++;
		rsp_cblog_add((int64) b);
		return b;
	}
	if (st->pos >= st->nplan)
	{
		rsp_cblog_add(-1);
		return InvalidBlockNumber;
	}
	b = st->plan[st->pos++];
	if (per_buffer_data != NULL)
		memcpy(per_buffer_data, &st->produced, sizeof(int64));
	st->produced++;
	rsp_cblog_add((int64) b);
	return b;
}

static void
rsp_plan_add(RspStream *st, ArrayType *arr)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	deconstruct_array(arr, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
					  &elems, &nulls, &n);
	for (int i = 0; i < n; i++)
	{
		int64		v = nulls[i] ? -1 : DatumGetInt64(elems[i]);

		if (v < 0 || v >= (int64) MaxBlockNumber)
			ereport(ERROR,
					(errmsg("rsprobe: block %lld is not a block number (0 .. %u)",
							(long long) v, MaxBlockNumber - 1)));
		st->plan = rsp_reserve(st->plan, st->nplan, &st->plan_cap, sizeof(BlockNumber), 64,
							   TopTransactionContext);
		st->plan[st->nplan++] = (BlockNumber) v;
	}
}

/* Release one pin the probe holds for the consumer (TopTransactionResourceOwner). */
static void
rsp_release_one(Buffer buf)
{
	ResourceOwner oldowner;
	int			i;

	for (i = 0; i < rsp_nheld; i++)
		if (rsp_held[i] == buf)
			break;
	if (i == rsp_nheld)
		ereport(ERROR, (errmsg("rsprobe: buffer %d is not held by the consumer", buf)));
	rsp_held[i] = rsp_held[--rsp_nheld];
	oldowner = CurrentResourceOwner;
	CurrentResourceOwner = TopTransactionResourceOwner;
	ReleaseBuffer(buf);
	CurrentResourceOwner = oldowner;
}

/*
 * The consumer's releases since the last call, done before the stream runs again: releasing
 * a returned buffer costs no round trip of its own, and the stream sees the same pin budget.
 */
static void
rsp_release_array(ArrayType *arr)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	deconstruct_array(arr, INT4OID, sizeof(int32), true, TYPALIGN_INT, &elems, &nulls, &n);
	for (int i = 0; i < n; i++)
		if (!nulls[i])
			rsp_release_one(DatumGetInt32(elems[i]));
}

static RspStream *
rsp_lookup(int id)
{
	for (int i = 0; i < RSP_MAX_STREAMS; i++)
		if (rsp_streams[i] != NULL && rsp_streams[i]->id == id)
			return rsp_streams[i];
	ereport(ERROR, (errmsg("rsprobe: no stream %d in this transaction", id)));
	pg_unreachable();
}

/*
 * The stream's own fields as JSON, read by the accessor generated inside the traced copy from
 * the server's struct ReadStream (null when the sanity checks fail, or untraced).
 */
static bool
rsp_stream_json(StringInfo s, RspStream *st)
{
#ifdef RSPROBE_TRACED
	if (st->stream == NULL || st->ended)
	{
		appendStringInfoString(s, "null");
		return false;
	}
	return rsp_traced_stream_json(st->stream, s, rsp_callback, st, st->pbd_size);
#else
	appendStringInfoString(s, "null");
	return false;
#endif
}

/* Whether the accessor reads this stream (its sanity checks hold). */
static bool
rsp_layout_ok(RspStream *st)
{
	StringInfoData tmp;
	bool		ok;

	initStringInfo(&tmp);
	ok = rsp_stream_json(&tmp, st);
	pfree(tmp.data);
	return ok;
}

static void
rsp_trace_json(StringInfo s)
{
#ifdef RSPROBE_TRACED
	const RspTraceEvent *ev = rsp_trace_events();
	int			n = rsp_trace_count();

	appendStringInfoChar(s, '[');
	for (int i = 0; i < n; i++)
	{
		appendStringInfo(s, "%s[%d,%d,%u,%d,%d,%d,%d,%d,%s,", i ? "," : "",
						 ev[i].kind, ev[i].buffer, ev[i].blocknum, ev[i].nblocks_asked,
						 ev[i].nblocks_accepted, ev[i].forwarded, ev[i].additional_pin_limit,
						 ev[i].flags, ev[i].must_wait ? "true" : "false");
		/* What the call returned, where it returns something (else null). */
		if (ev[i].has_result)
			appendStringInfo(s, "%d]", ev[i].result);
		else
			appendStringInfoString(s, "null]");
	}
	appendStringInfoChar(s, ']');
	rsp_trace_clear();
#else
	appendStringInfoString(s, "null");
#endif
}

/* Buffers of (rel, fork) whose shared descriptor shows a pin: [buffer, block, refcount]. */
static void
rsp_rel_pins_json(StringInfo s, Relation rel, ForkNumber fork)
{
	bool		first = true;

	appendStringInfoChar(s, '[');
	for (int i = 0; i < NBuffers; i++)
	{
		BufferDesc *desc = GetBufferDescriptor(i);
		uint64		state = RSP_BUF_STATE(desc);

		if (RSP_BUF_REFCOUNT(state) == 0)
			continue;
		if (!BufTagMatchesRelFileLocator(&desc->tag, &rel->rd_locator) ||
			BufTagGetForkNum(&desc->tag) != fork)
			continue;
		appendStringInfo(s, "%s[%d,%u,%u]", first ? "" : ",", i + 1, desc->tag.blockNum,
						 RSP_BUF_REFCOUNT(state));
		first = false;
	}
	appendStringInfoChar(s, ']');
}

/* The fields every call reports; the caller has opened the object and written its own. */
static text *
rsp_finish(StringInfo s, RspStream *st)
{
	appendStringInfo(s, ",\"pin_limit\":%u,\"additional_pin_limit\":%u",
					 GetPinLimit(), GetAdditionalPinLimit());
	appendStringInfo(s, ",\"blocks_read\":%lld,\"blocks_hit\":%lld",
					 (long long) (pgBufferUsage.shared_blks_read - rsp_read_before),
					 (long long) (pgBufferUsage.shared_blks_hit - rsp_hit_before));
	appendStringInfoString(s, ",\"callback\":[");
	for (int i = 0; i < rsp_ncblog; i++)
		appendStringInfo(s, "%s%lld", i ? "," : "", (long long) rsp_cblog[i]);
	appendStringInfoString(s, "],\"held\":[");
	for (int i = 0; i < rsp_nheld; i++)
		appendStringInfo(s, "%s%d", i ? "," : "", rsp_held[i]);
	appendStringInfoChar(s, ']');
	if (st != NULL)
	{
		appendStringInfoString(s, ",\"rel_pins\":");
		rsp_rel_pins_json(s, st->rel, st->fork);
		appendStringInfoString(s, ",\"stream\":");
		if (st->ended)
			appendStringInfoString(s, "null");
		else
			rsp_stream_json(s, st);
	}
	appendStringInfoString(s, ",\"trace\":");
	rsp_trace_json(s);
	appendStringInfoChar(s, '}');
	return cstring_to_text_with_len(s->data, s->len);
}

static BufferAccessStrategyType
rsp_strategy_type(const char *name)
{
	if (strcmp(name, "bulkread") == 0)
		return BAS_BULKREAD;
	if (strcmp(name, "bulkwrite") == 0)
		return BAS_BULKWRITE;
	if (strcmp(name, "vacuum") == 0)
		return BAS_VACUUM;
	ereport(ERROR,
			(errmsg("rsprobe: strategy \"%s\" is not one of bulkread, bulkwrite, vacuum", name)));
	pg_unreachable();
}

Datum
rsp_info(PG_FUNCTION_ARGS)
{
	StringInfoData s;

	initStringInfo(&s);
	/*
	 * layout: "source" when the stream's state is read by the accessor generated from the
	 * server's own struct ReadStream (traced builds), else "none", with the reason.
	 */
	appendStringInfo(&s, "{\"version_num\":%d,\"traced\":%s,\"layout\":\"%s\",\"layout_why\":\"%s\","
					 "\"pause_resume\":%s,\"mutant\":\"%s\",\"nbuffers\":%d,"
					 "\"io_combine_limit\":%d,\"pin_limit\":%u,\"additional_pin_limit\":%u}",
					 PG_VERSION_NUM,
#ifdef RSPROBE_TRACED
					 "true",
					 RSPROBE_TRACED_STATE ? "source" : "none",
					 RSPROBE_TRACED_STATE_WHY,
#else
					 "false",
					 "none",
					 "the probe runs untraced: struct ReadStream is known only from a source tree",
#endif
					 RSP_HAVE_PAUSE ? "true" : "false",
#ifdef RSPROBE_TRACED
					 RSPROBE_TRACED_MUTANT,
#else
					 "",
#endif
					 NBuffers, io_combine_limit, GetPinLimit(), GetAdditionalPinLimit());
	PG_RETURN_TEXT_P(cstring_to_text_with_len(s.data, s.len));
}

Datum
rsp_begin(PG_FUNCTION_ARGS)
{
	Oid			relid;
	int			fork;
	int			flags;
	RspStream  *st;
	int			slot = -1;
	MemoryContext oldcxt;
	ResourceOwner oldowner;
	StringInfoData s;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2) || PG_ARGISNULL(5) || PG_ARGISNULL(9))
		ereport(ERROR, (errmsg("rsprobe: rsp_begin needs rel, fork, flags and per_buffer_data")));
	rsp_setup();
	relid = PG_GETARG_OID(0);
	fork = PG_GETARG_INT32(1);
	flags = PG_GETARG_INT32(2);
	if (fork < 0 || fork > MAX_FORKNUM)
		ereport(ERROR, (errmsg("rsprobe: fork %d is not a fork number (0 .. %d)", fork, MAX_FORKNUM)));
	for (int i = 0; i < RSP_MAX_STREAMS; i++)
		if (rsp_streams[i] == NULL)
		{
			slot = i;
			break;
		}
	if (slot < 0)
		ereport(ERROR, (errmsg("rsprobe: more than %d streams in one transaction", RSP_MAX_STREAMS)));

	/* Memory and resources that outlive this statement (see the file header). */
	oldcxt = MemoryContextSwitchTo(TopTransactionContext);
	oldowner = CurrentResourceOwner;
	CurrentResourceOwner = TopTransactionResourceOwner;

	st = palloc0(sizeof(RspStream));
	st->id = rsp_next_id++;
	st->relid = relid;
	st->fork = (ForkNumber) fork;
	st->rel = relation_open(relid, AccessShareLock);
	st->pbd_size = PG_GETARG_BOOL(5) ? sizeof(int64) : 0;
	if (!PG_ARGISNULL(3))
	{
		BufferAccessStrategyType btype = rsp_strategy_type(text_to_cstring(PG_GETARG_TEXT_PP(3)));

		st->strategy = PG_ARGISNULL(4)
			? GetAccessStrategy(btype)
			: GetAccessStrategyWithSize(btype, PG_GETARG_INT32(4));
	}
	if (!PG_ARGISNULL(6))
		rsp_plan_add(st, PG_GETARG_ARRAYTYPE_P(6));
	if (!PG_ARGISNULL(7) && !PG_ARGISNULL(8))
	{
		int64		first = PG_GETARG_INT64(7);
		int64		end = PG_GETARG_INT64(8);

		/*
		 * end < first is a range too: block_range_read_stream_cb hands out nothing for it, as
		 * for first == end (the systematic mutants' gap tests begin such streams).
		 */
		if (first < 0 || first > (int64) MaxBlockNumber || end < 0 || end > (int64) MaxBlockNumber)
			ereport(ERROR,
					(errmsg("rsprobe: block range %lld .. %lld is not a range of block numbers",
							(long long) first, (long long) end)));
		st->use_range = true;
		st->range.current_blocknum = (BlockNumber) first;
		st->range.last_exclusive = (BlockNumber) end;
	}
	/* own: the server's compiled read_stream.c even in a traced build (its state is read alike). */
	st->own = PG_GETARG_BOOL(9);
	rsp_streams[slot] = st;
	if (st->own)
		st->stream = read_stream_begin_relation(flags, st->strategy, st->rel, st->fork,
												rsp_callback, st, st->pbd_size);
	else
		st->stream = RSP_BEGIN_RELATION(flags, st->strategy, st->rel, st->fork,
										rsp_callback, st, st->pbd_size);

	CurrentResourceOwner = oldowner;
	MemoryContextSwitchTo(oldcxt);

	initStringInfo(&s);
	appendStringInfo(&s, "{\"id\":%d,\"layout_verified\":%s", st->id,
					 rsp_layout_ok(st) ? "true" : "false");
	PG_RETURN_TEXT_P(rsp_finish(&s, st));
}

Datum
rsp_plan(PG_FUNCTION_ARGS)
{
	RspStream  *st;
	StringInfoData s;

	rsp_setup();
	st = rsp_lookup(PG_GETARG_INT32(0));
	rsp_plan_add(st, PG_GETARG_ARRAYTYPE_P(1));
	initStringInfo(&s);
	appendStringInfo(&s, "{\"planned\":%d,\"position\":%d", st->nplan, st->pos);
	PG_RETURN_TEXT_P(rsp_finish(&s, st));
}

Datum
rsp_next(PG_FUNCTION_ARGS)
{
	RspStream  *st;
	void	   *pbd = NULL;
	Buffer		buf;
	ResourceOwner oldowner;
	StringInfoData s;

	rsp_setup();
	st = rsp_lookup(PG_GETARG_INT32(0));
	if (st->ended)
		ereport(ERROR, (errmsg("rsprobe: stream %d has ended", st->id)));
	rsp_release_array(PG_GETARG_ARRAYTYPE_P(1));
	oldowner = CurrentResourceOwner;
	CurrentResourceOwner = TopTransactionResourceOwner;
	buf = st->own ? read_stream_next_buffer(st->stream, st->pbd_size ? &pbd : NULL)
		: RSP_NEXT_BUFFER(st->stream, st->pbd_size ? &pbd : NULL);

	initStringInfo(&s);
	if (BufferIsValid(buf))
	{
		BufferDesc *desc = GetBufferDescriptor(buf - 1);
		uint64		state = RSP_BUF_STATE(desc);
		int64		data = -1;

		const char *page = (const char *) BufferGetPage(buf);
		bool		zero_page = true;

		if (pbd != NULL)
			memcpy(&data, pbd, sizeof(int64));
		/* zero_page: the page is all zeroes (what zero_damaged_pages leaves of a damaged page). */
		for (int i = 0; i < BLCKSZ && zero_page; i++)
			zero_page = page[i] == 0;
		/*
		 * shared_refs: the descriptor's count of backends pinning it.  This backend's own count
		 * is private to bufmgr.c; zero here would mean the buffer came back without a pin.
		 */
		appendStringInfo(&s, "{\"buffer\":%d,\"block\":%u,\"fork\":%d,\"same_relation\":%s,"
						 "\"valid\":%s,\"data\":%lld,\"shared_refs\":%u,\"zero_page\":%s",
						 buf, desc->tag.blockNum, (int) BufTagGetForkNum(&desc->tag),
						 BufTagMatchesRelFileLocator(&desc->tag, &st->rel->rd_locator) ? "true" : "false",
						 (state & BM_VALID) ? "true" : "false", (long long) data,
						 RSP_BUF_REFCOUNT(state), zero_page ? "true" : "false");
		/* The caller's pin: held until the consumer releases it (rsp_release or the next call). */
		rsp_held_add(buf);
	}
	else
		appendStringInfo(&s, "{\"buffer\":0");
	CurrentResourceOwner = oldowner;
	PG_RETURN_TEXT_P(rsp_finish(&s, st));
}

Datum
rsp_reset(PG_FUNCTION_ARGS)
{
	RspStream  *st;
	ResourceOwner oldowner;
	StringInfoData s;

	rsp_setup();
	st = rsp_lookup(PG_GETARG_INT32(0));
	if (st->ended)
		ereport(ERROR, (errmsg("rsprobe: stream %d has ended", st->id)));
	rsp_release_array(PG_GETARG_ARRAYTYPE_P(1));
	oldowner = CurrentResourceOwner;
	CurrentResourceOwner = TopTransactionResourceOwner;
	if (st->own)
		read_stream_reset(st->stream);
	else
		RSP_RESET(st->stream);
	CurrentResourceOwner = oldowner;
	initStringInfo(&s);
	appendStringInfoString(&s, "{\"reset\":true");
	PG_RETURN_TEXT_P(rsp_finish(&s, st));
}

Datum
rsp_end(PG_FUNCTION_ARGS)
{
	RspStream  *st;
	ResourceOwner oldowner;
	StringInfoData s;

	rsp_setup();
	st = rsp_lookup(PG_GETARG_INT32(0));
	if (st->ended)
		ereport(ERROR, (errmsg("rsprobe: stream %d has ended", st->id)));
	rsp_release_array(PG_GETARG_ARRAYTYPE_P(1));
	oldowner = CurrentResourceOwner;
	CurrentResourceOwner = TopTransactionResourceOwner;
	if (st->own)
		read_stream_end(st->stream);
	else
		RSP_END(st->stream);
	st->stream = NULL;
	st->ended = true;
	CurrentResourceOwner = oldowner;
	initStringInfo(&s);
	appendStringInfoString(&s, "{\"ended\":true");
	PG_RETURN_TEXT_P(rsp_finish(&s, st));
}

/*
 * More positions (counts of blocks the callback has produced) at which the callback pauses the
 * stream: it calls read_stream_pause() and returns its result instead of a block, once per
 * position, as the harness's callback does (conformance's BlockSource.pause_at).
 */
Datum
rsp_pause_at(PG_FUNCTION_ARGS)
{
	RspStream  *st;
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	StringInfoData s;

	rsp_setup();
	st = rsp_lookup(PG_GETARG_INT32(0));
	if (!RSP_HAVE_PAUSE)
		ereport(ERROR, (errmsg("rsprobe: this server's read_stream.c has no read_stream_pause()")));
	arr = PG_GETARG_ARRAYTYPE_P(1);
	deconstruct_array(arr, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
					  &elems, &nulls, &n);
	for (int i = 0; i < n; i++)
	{
		int64		v = nulls[i] ? -1 : DatumGetInt64(elems[i]);

		if (v < st->produced)
			ereport(ERROR,
					(errmsg("rsprobe: pause position %lld is behind the %lld blocks produced",
							(long long) v, (long long) st->produced)));
		st->pauses = rsp_reserve(st->pauses, st->npauses, &st->pause_cap, sizeof(int64), 8,
								 TopTransactionContext);
		st->pauses[st->npauses++] = v;
	}
	initStringInfo(&s);
	appendStringInfo(&s, "{\"pauses\":%d", st->npauses);
	PG_RETURN_TEXT_P(rsp_finish(&s, st));
}

/* read_stream_resume() after the callback paused the stream. */
Datum
rsp_resume(PG_FUNCTION_ARGS)
{
	RspStream  *st;
	StringInfoData s;

	rsp_setup();
	st = rsp_lookup(PG_GETARG_INT32(0));
	if (st->ended)
		ereport(ERROR, (errmsg("rsprobe: stream %d has ended", st->id)));
	rsp_release_array(PG_GETARG_ARRAYTYPE_P(1));
#if RSP_HAVE_PAUSE
	if (st->own)
		read_stream_resume(st->stream);
	else
		RSP_RESUME(st->stream);
#else
	ereport(ERROR, (errmsg("rsprobe: this server's read_stream.c has no read_stream_resume()")));
#endif
	initStringInfo(&s);
	appendStringInfoString(&s, "{\"resumed\":true");
	PG_RETURN_TEXT_P(rsp_finish(&s, st));
}

/* Pin a block for the consumer (ReadBufferExtended) and keep it until rsp_release. */
Datum
rsp_pin(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	int			fork = PG_GETARG_INT32(1);
	int64		block = PG_GETARG_INT64(2);
	Relation	rel;
	Buffer		buf;
	ResourceOwner oldowner;
	StringInfoData s;

	rsp_setup();
	if (fork < 0 || fork > MAX_FORKNUM)
		ereport(ERROR, (errmsg("rsprobe: fork %d is not a fork number (0 .. %d)", fork, MAX_FORKNUM)));
	if (block < 0 || block >= (int64) MaxBlockNumber)
		ereport(ERROR, (errmsg("rsprobe: block %lld is not a block number", (long long) block)));
	oldowner = CurrentResourceOwner;
	CurrentResourceOwner = TopTransactionResourceOwner;
	rel = relation_open(relid, AccessShareLock);
	buf = ReadBufferExtended(rel, (ForkNumber) fork, (BlockNumber) block, RBM_NORMAL, NULL);
	rsp_held_add(buf);
	relation_close(rel, NoLock);
	CurrentResourceOwner = oldowner;
	initStringInfo(&s);
	appendStringInfo(&s, "{\"buffer\":%d,\"block\":%lld", buf, (long long) block);
	PG_RETURN_TEXT_P(rsp_finish(&s, NULL));
}

Datum
rsp_release(PG_FUNCTION_ARGS)
{
	StringInfoData s;

	rsp_setup();
	rsp_release_array(PG_GETARG_ARRAYTYPE_P(0));
	initStringInfo(&s);
	appendStringInfoString(&s, "{\"released\":true");
	PG_RETURN_TEXT_P(rsp_finish(&s, NULL));
}

Datum
rsp_state(PG_FUNCTION_ARGS)
{
	RspStream  *st;
	StringInfoData s;

	rsp_setup();
	st = rsp_lookup(PG_GETARG_INT32(0));
	initStringInfo(&s);
	appendStringInfo(&s, "{\"id\":%d,\"layout_verified\":%s", st->id,
					 rsp_layout_ok(st) ? "true" : "false");
	PG_RETURN_TEXT_P(rsp_finish(&s, st));
}

/*
 * Append nblocks all-zero pages to the main fork (smgrzeroextend, without the buffer pool): a
 * zeroed page passes page verification, so a stream reads it like any other, and the new
 * blocks are cold as the model's grown blocks are.  Relations of any size are made in moments.
 */
Datum
rsp_extend(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	int64		nblocks = PG_GETARG_INT64(1);
	Relation	rel;
	SMgrRelation smgr;
	BlockNumber first;
	BlockNumber now;
	StringInfoData s;

	if (nblocks < 0 || nblocks > (int64) MaxBlockNumber)
		ereport(ERROR, (errmsg("rsprobe: cannot extend by %lld blocks", (long long) nblocks)));
	/* Streams of other sessions may have it open: the extension lock is what extending needs. */
	rel = relation_open(relid, AccessShareLock);
	LockRelationForExtension(rel, ExclusiveLock);
	smgr = RelationGetSmgr(rel);
	first = smgrnblocks(smgr, MAIN_FORKNUM);
	if (nblocks > 0)
		smgrzeroextend(smgr, MAIN_FORKNUM, first, (int) nblocks, false);
	now = smgrnblocks(smgr, MAIN_FORKNUM);
	UnlockRelationForExtension(rel, ExclusiveLock);
	relation_close(rel, NoLock);
	initStringInfo(&s);
	appendStringInfo(&s, "{\"first\":%u,\"nblocks\":%u}", first, now);
	PG_RETURN_TEXT_P(cstring_to_text_with_len(s.data, s.len));
}

/*
 * The pins on blocks first .. last of a relation's main fork, from the shared descriptors,
 * whether or not the pages are valid (pg_buffercache shows nothing of a page being read in):
 * the harness sees from another session when a stream pins a block another backend is reading.
 */
Datum
rsp_pins(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	int64		first = PG_GETARG_INT64(1);
	int64		last = PG_GETARG_INT64(2);
	Relation	rel;
	int64		pins = 0;

	rel = relation_open(relid, AccessShareLock);
	for (int i = 0; i < NBuffers; i++)
	{
		BufferDesc *desc = GetBufferDescriptor(i);
		uint64		state = RSP_BUF_STATE(desc);

		if (!(state & BM_TAG_VALID) || RSP_BUF_REFCOUNT(state) == 0)
			continue;
		if (!BufTagMatchesRelFileLocator(&desc->tag, &rel->rd_locator) ||
			BufTagGetForkNum(&desc->tag) != MAIN_FORKNUM)
			continue;
		if ((int64) desc->tag.blockNum < first || (int64) desc->tag.blockNum > last)
			continue;
		pins += RSP_BUF_REFCOUNT(state);
	}
	relation_close(rel, AccessShareLock);
	PG_RETURN_INT64(pins);
}

/*
 * From now until the end of the transaction, the traced stream's GetAdditionalPinLimit() and
 * GetAdditionalLocalPinLimit() answer ``limit`` (-1: the buffer manager's own answer again): the
 * pin budget of a pool far larger than the server's, up to and beyond int16 (issue 26, class 2).
 * The stream asks, so its trace records the chosen answer as the limit in force.
 */
Datum
rsp_force_pin_limit(PG_FUNCTION_ARGS)
{
	int64		limit = PG_GETARG_INT64(0);
	StringInfoData s;

	rsp_setup();
	if (limit < -1 || limit > (int64) PG_UINT32_MAX)
		ereport(ERROR,
				(errmsg("rsprobe: pin limit %lld is not -1 or 0 .. %u", (long long) limit, PG_UINT32_MAX)));
#ifdef RSPROBE_TRACED
	rsp_trace_force_pin_limit(limit);
#else
	ereport(ERROR,
			(errmsg("rsprobe: a chosen pin limit needs the traced copy of read_stream.c")));
#endif
	initStringInfo(&s);
	appendStringInfo(&s, "{\"forced_pin_limit\":%lld", (long long) limit);
	PG_RETURN_TEXT_P(rsp_finish(&s, NULL));
}
